#include "backend.hpp"

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab {

const char* to_string(BackendKind kind) {
  switch (kind) {
    case BackendKind::reference: return "reference";
    case BackendKind::optimized: return "optimized";
    case BackendKind::cuda: return "cuda";
    case BackendKind::student: return "student";
  }
  return "unknown";
}

std::optional<std::string> unavailable_reason(const Capabilities& caps) {
  if (caps.needs_device && !cuda::device_available()) return cuda::device_description();
  return std::nullopt;
}

void throw_no_reference_backend() {
  fail("backends", "the registry has no entry of kind reference: it defines the results the others are compared with");
}

void throw_unknown_backend(std::string_view selection, const std::string& names) {
  fail("--backend", "no backend named '", std::string(selection), "'; registered: ", names, ", or all");
}

}  // namespace tvlab

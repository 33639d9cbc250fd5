#pragma once
// What every stand-in of a CUDA entry point throws when tvlab was built without nvcc.

#include <stdexcept>
#include <string>

namespace tvlab::cuda {

[[noreturn]] inline void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": tvlab was built without CUDA (nvcc was not found at configure time)");
}

}  // namespace tvlab::cuda

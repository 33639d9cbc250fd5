// Built when nvcc is not found: the device entry points of cuda/src/delta_rule.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/delta_rule_device.hpp"

namespace tvlab::cuda::device {
std::size_t delta_rule_shared_bytes(std::size_t, std::size_t, bool) { no_cuda("delta_rule_shared_bytes"); }
void delta_rule(const DeltaRuleArgs&) { no_cuda("delta_rule"); }
}  // namespace tvlab::cuda::device

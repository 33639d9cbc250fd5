#include "backends.hpp"

#include "tvlab/cuda/moe.hpp"
#include "tvlab/opt/moe.hpp"
#include "tvlab/opt/moe_backward.hpp"
#include "tvlab/ref/moe.hpp"
#include "tvlab/ref/moe_backward.hpp"
#include "tvlab/ref/moe_balance.hpp"
#include "tvlab/ref/moe_capacity.hpp"
#include "tvlab/ref/moe_router.hpp"
#include "tvlab/student/moe.hpp"

namespace tvlab::moe {

// Every implementation, in the order the lesson reads them: the reference, the optimized CPU
// version, the student's.
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
      {.name = "ref",
       .kind = BackendKind::reference,
       .route_top_k = ref::route_top_k,
       .moe_experts = ref::moe_experts,
       .moe_layer = ref::moe_layer,
       .moe_layer_backward = ref::moe_layer_backward,
       .apply_capacity = ref::apply_capacity,
       .update_bias = ref::update_bias},
      {.name = "opt",
       .kind = BackendKind::optimized,
       .moe_experts = opt::moe_experts,
       .moe_layer = opt::moe_layer,
       .moe_layer_backward = opt::moe_layer_backward},
      {.name = "cuda",
       .kind = BackendKind::cuda,
       .caps = {.needs_device = true},
       .route_top_k = cuda::route_top_k,
       .moe_experts = cuda::moe_experts,
       .moe_layer = cuda::moe_layer},
      {.name = "student",
       .kind = BackendKind::student,
       .route_top_k = student::route_top_k,
       .apply_capacity = student::apply_capacity,
       .update_bias = student::update_bias},
  };
  return all;
}

}  // namespace tvlab::moe

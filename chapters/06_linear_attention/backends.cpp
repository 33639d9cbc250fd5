#include "backends.hpp"

#include "tvlab/cuda/delta_rule.hpp"
#include "tvlab/cuda/linear_attention.hpp"
#include "tvlab/opt/delta_rule.hpp"
#include "tvlab/opt/linear_attention.hpp"
#include "tvlab/opt/performer.hpp"
#include "tvlab/ref/delta_rule.hpp"
#include "tvlab/ref/linear_attention.hpp"
#include "tvlab/ref/performer.hpp"
#include "tvlab/student/linear_attention.hpp"

namespace tvlab::linear {

// Every implementation, in the order the lesson reads them: the reference (plain loops, double
// accumulation), the optimized CPU versions, the CUDA kernels, then the student's (the exercises).
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
      {.name = "ref",
       .kind = BackendKind::reference,
       .linear_attention = ref::linear_attention,
       .causal_parallel = ref::causal_linear_attention_parallel,
       .causal_recurrent = ref::causal_linear_attention_recurrent,
       .causal_chunked = ref::causal_linear_attention_chunked,
       .delta_recurrent = ref::delta_rule_recurrent,
       .delta_chunked = ref::delta_rule_chunked,
       .performer = ref::performer_attention},
      {.name = "opt",
       .kind = BackendKind::optimized,
       .linear_attention = opt::linear_attention,
       .causal_parallel = opt::causal_linear_attention_parallel,
       .causal_recurrent = opt::causal_linear_attention_recurrent,
       .causal_chunked = opt::causal_linear_attention_chunked,
       .delta_recurrent = opt::delta_rule_recurrent,
       .delta_chunked = opt::delta_rule_chunked,
       .performer = opt::performer_attention},
      // On a CUDA device: the recurrence (its one-token call the decode step) and the chunked forms.
      {.name = "cuda",
       .kind = BackendKind::cuda,
       .caps = {.needs_device = true},
       .causal_recurrent = cuda::causal_linear_attention_recurrent,
       .causal_chunked = cuda::causal_linear_attention_chunked,
       .delta_recurrent = cuda::delta_rule_recurrent,
       .delta_chunked = cuda::delta_rule_chunked},
      // Exercise 06.1, the causal recurrence with its normaliser.
      {.name = "student", .kind = BackendKind::student, .causal_recurrent = student::causal_linear_attention_recurrent},
  };
  return all;
}

}  // namespace tvlab::linear

#include "backends.hpp"

#include "tvlab/cuda/softmax.hpp"
#include "tvlab/opt/softmax.hpp"
#include "tvlab/ref/softmax.hpp"
#include "tvlab/student/example.hpp"

namespace tvlab::kv {

// Every implementation, in the order the lesson reads them: the reference, each optimized
// version, the CUDA kernels, the student's. Numbered versions come from the topic's variant
// table (see opt::attention_variants() in chapter 00).
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
      {.name = "ref", .kind = BackendKind::reference, .softmax = ref::softmax},
      {.name = "opt", .kind = BackendKind::optimized, .softmax = opt::softmax},
      {.name = "cuda", .kind = BackendKind::cuda, .caps = {.needs_device = true}, .softmax = cuda::softmax},
      {.name = "student", .kind = BackendKind::student, .softmax = student::example_softmax},
  };
  return all;
}

}  // namespace tvlab::kv

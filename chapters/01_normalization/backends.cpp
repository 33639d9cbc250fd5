#include "backends.hpp"

#include "tvlab/cuda/activations.hpp"
#include "tvlab/cuda/ffn.hpp"
#include "tvlab/cuda/normalization.hpp"
#include "tvlab/opt/activations.hpp"
#include "tvlab/opt/ffn.hpp"
#include "tvlab/opt/normalization.hpp"
#include "tvlab/ref/activations.hpp"
#include "tvlab/ref/ffn.hpp"
#include "tvlab/ref/normalization.hpp"
#include "tvlab/student/ffn.hpp"
#include "tvlab/student/normalization.hpp"

namespace tvlab::ch01 {

const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
      {.name = "ref",
       .kind = BackendKind::reference,
       .layer_norm = ref::layer_norm,
       .layer_norm_backward = ref::layer_norm_backward,
       .rms_norm = ref::rms_norm,
       .rms_norm_backward = ref::rms_norm_backward,
       .relu = ref::relu,
       .gelu = ref::gelu,
       .gelu_tanh = ref::gelu_tanh,
       .silu = ref::silu,
       .ffn_relu = ref::ffn_relu,
       .ffn_gelu = ref::ffn_gelu,
       .ffn_swiglu = ref::ffn_swiglu},
      {.name = "opt",
       .kind = BackendKind::optimized,
       .layer_norm = opt::layer_norm,
       .layer_norm_backward = opt::layer_norm_backward,
       .rms_norm = opt::rms_norm,
       .rms_norm_backward = opt::rms_norm_backward,
       .relu = opt::relu,
       .gelu = opt::gelu,
       .gelu_tanh = opt::gelu_tanh,
       .silu = opt::silu,
       .ffn_relu = opt::ffn_relu,
       .ffn_gelu = opt::ffn_gelu,
       .ffn_swiglu = opt::ffn_swiglu},
      {.name = "cuda",
       .kind = BackendKind::cuda,
       .caps = {.needs_device = true},
       .layer_norm = cuda::layer_norm,
       .layer_norm_backward = cuda::layer_norm_backward,
       .rms_norm = cuda::rms_norm,
       .rms_norm_backward = cuda::rms_norm_backward,
       .relu = cuda::relu,
       .gelu = cuda::gelu,
       .gelu_tanh = cuda::gelu_tanh,
       .silu = cuda::silu,
       .ffn_relu = cuda::ffn_relu,
       .ffn_gelu = cuda::ffn_gelu,
       .ffn_swiglu = cuda::ffn_swiglu},
      // Exercises 01.1 to 01.3: RMSNorm forward and backward, the SwiGLU FFN.
      {.name = "student",
       .kind = BackendKind::student,
       .rms_norm = student::rms_norm,
       .rms_norm_backward = student::rms_norm_backward,
       .ffn_swiglu = student::ffn_swiglu},
  };
  return all;
}

}  // namespace tvlab::ch01

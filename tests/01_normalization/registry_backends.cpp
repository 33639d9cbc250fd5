#include "impls.hpp"
#include "tvlab/cuda/activations.hpp"
#include "tvlab/cuda/ffn.hpp"
#include "tvlab/cuda/normalization.hpp"
#include "tvlab/opt/activations.hpp"
#include "tvlab/opt/ffn.hpp"
#include "tvlab/opt/normalization.hpp"
#include "tvlab/ref/activations.hpp"
#include "tvlab/ref/ffn.hpp"
#include "tvlab/ref/normalization.hpp"

namespace tvlab::ch01 {

#define TVLAB_CH01_IMPL(ns, device)                                                                          \
  Impl {                                                                                                     \
    #ns, device, ns::layer_norm, ns::layer_norm_backward, ns::rms_norm, ns::rms_norm_backward, ns::relu,     \
        ns::gelu, ns::gelu_tanh, ns::silu, ns::ffn_relu, ns::ffn_gelu, ns::ffn_swiglu                        \
  }

const std::vector<Impl>& registry() {
  static const std::vector<Impl> impls = {TVLAB_CH01_IMPL(ref, false), TVLAB_CH01_IMPL(opt, false),
                                          TVLAB_CH01_IMPL(cuda, true)};
  return impls;
}

}  // namespace tvlab::ch01

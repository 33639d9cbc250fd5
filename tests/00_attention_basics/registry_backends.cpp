#include "impls.hpp"
#include "tvlab/cuda/attention.hpp"
#include "tvlab/cuda/softmax.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/softmax.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/softmax.hpp"

namespace tvlab::ch00 {

const std::vector<Impl>& registry() {
  static const std::vector<Impl> impls = {
      {"ref", false, ref::softmax, ref::scaled_dot_product_attention, ref::multi_head_attention},
      {"opt", false, opt::softmax, opt::scaled_dot_product_attention, opt::multi_head_attention},
      {"cuda", true, cuda::softmax, cuda::scaled_dot_product_attention, cuda::multi_head_attention},
  };
  return impls;
}

}  // namespace tvlab::ch00

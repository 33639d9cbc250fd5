#include "impls.hpp"
#include "tvlab/cuda/rope.hpp"
#include "tvlab/opt/alibi.hpp"
#include "tvlab/opt/rope.hpp"
#include "tvlab/ref/alibi.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ch02 {

const std::vector<Impl>& registry() {
  static const std::vector<Impl> impls = {
      {"ref", false, ref::apply_rope, ref::alibi_bias},
      {"opt", false, opt::apply_rope, opt::alibi_bias},
      {"cuda", true, cuda::apply_rope, nullptr},
  };
  return impls;
}

}  // namespace tvlab::ch02

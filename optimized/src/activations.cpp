#include "tvlab/opt/activations.hpp"

#include "detail/activation_ops.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::opt {
namespace {

// Chunks of 16 Ki floats (64 KiB) per thread: enough work per chunk to amortise the thread
// scheduling, small enough to balance two or more cores.
template <class Op>
Tensor2 elementwise(const char* fn, const Tensor2& x, Op op) {
  require_finite(fn, "x", x);
  Tensor2 y = Tensor2::from_shape({x.shape()[0], x.shape()[1]});
  constexpr std::size_t chunk = 16384;
  const std::size_t n = x.size();
  const auto chunks = static_cast<std::ptrdiff_t>((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * chunk, len = std::min(chunk, n - begin);
    detail::apply(x.data() + begin, nullptr, y.data() + begin, len, op);
  }
  return y;
}

}  // namespace

Tensor2 relu(const Tensor2& x) { return elementwise("relu", x, detail::Relu{}); }
Tensor2 gelu(const Tensor2& x) { return elementwise("gelu", x, detail::Gelu{}); }
Tensor2 gelu_tanh(const Tensor2& x) { return elementwise("gelu_tanh", x, detail::GeluTanh{}); }
Tensor2 silu(const Tensor2& x) { return elementwise("silu", x, detail::Silu{}); }

}  // namespace tvlab::opt

#pragma once
// The activations as xsimd functors: each works on a batch of floats (8 on AVX2, 16 on AVX-512),
// so one loop body serves the activations and the fused FFN epilogues.

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstddef>

namespace tvlab::opt::detail {

using Batch = xsimd::batch<float>;

// max(0, x)
struct Relu {
  Batch operator()(Batch v) const { return xsimd::max(v, Batch(0.0f)); }
};

// x/2 (1 + erf(x / sqrt 2))
struct Gelu {
  Batch operator()(Batch v) const { return Batch(0.5f) * v * (Batch(1.0f) + xsimd::erf(v * Batch(0.70710678118654752f))); }
};

// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
struct GeluTanh {
  Batch operator()(Batch v) const {
    const Batch inner = Batch(0.7978845608028654f) * (v + Batch(0.044715f) * v * v * v);
    return Batch(0.5f) * v * (Batch(1.0f) + xsimd::tanh(inner));
  }
};

// x / (1 + e^-x); for x << 0, e^-x = inf and x / inf = -0, the right limit.
struct Silu {
  Batch operator()(Batch v) const { return v / (Batch(1.0f) + xsimd::exp(-v)); }
};

/// y[i] = op(x[i] + bias[i]) for i < n (bias may be null; y may alias x). Whole batches first;
/// the last n % width elements go through one zero-padded batch, so there is no scalar copy of
/// each formula to keep in sync.
template <class Op>
void apply(const float* x, const float* bias, float* y, std::size_t n, Op op) {
  constexpr std::size_t width = Batch::size;
  const std::size_t vec_end = n - n % width;
  for (std::size_t i = 0; i < vec_end; i += width) {
    Batch v = Batch::load_unaligned(x + i);
    if (bias) v += Batch::load_unaligned(bias + i);
    op(v).store_unaligned(y + i);
  }
  if (vec_end == n) return;
  alignas(64) float tail[width] = {};
  for (std::size_t i = vec_end; i < n; ++i) tail[i - vec_end] = x[i] + (bias ? bias[i] : 0.0f);
  op(Batch::load_aligned(tail)).store_aligned(tail);
  std::copy(tail, tail + (n - vec_end), y + vec_end);
}

/// out[i] = SiLU(gate[i]) * up[i] (out may alias gate).
inline void swiglu_combine(const float* gate, const float* up, float* out, std::size_t n) {
  constexpr std::size_t width = Batch::size;
  const std::size_t vec_end = n - n % width;
  for (std::size_t i = 0; i < vec_end; i += width)
    (Silu{}(Batch::load_unaligned(gate + i)) * Batch::load_unaligned(up + i)).store_unaligned(out + i);
  if (vec_end == n) return;
  alignas(64) float g[width] = {}, u[width] = {};
  std::copy(gate + vec_end, gate + n, g);
  std::copy(up + vec_end, up + n, u);
  (Silu{}(Batch::load_aligned(g)) * Batch::load_aligned(u)).store_aligned(g);
  std::copy(g, g + (n - vec_end), out + vec_end);
}

}  // namespace tvlab::opt::detail

#include "tvlab/ref/nvfp4.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/fp8.hpp"
#include "tvlab/ref/microscaling.hpp"

namespace tvlab::ref {
namespace {

constexpr std::size_t kBlock = 16;
constexpr double kE2m1Max = 6.0, kE4m3Max = 448.0;

}  // namespace

Nvfp4Tensor nvfp4_quantize(const Tensor1& x) {
  const char* fn = "nvfp4_quantize";
  require_nonempty(fn, "x", x);
  require(x.size() % kBlock == 0, fn, "x's length (", x.size(), ") must be a multiple of NVFP4's block of 16");
  const float amax = require_finite_max_abs(fn, "x", x);
  Nvfp4Tensor q;
  q.block_scales.assign(x.size() / kBlock, 0);
  q.elements.assign(x.size(), 0);
  if (amax == 0.0f) return q;
  // g = max|x| / (6 * 448): the largest block scale becomes 448
  q.global_scale = static_cast<float>(amax / (kE2m1Max * kE4m3Max));
  for (std::size_t b = 0; b < q.block_scales.size(); ++b) {
    float block_max = 0.0f;
    for (std::size_t i = 0; i < kBlock; ++i) block_max = std::max(block_max, std::fabs(x(b * kBlock + i)));
    // s_b = E4M3(max_b / (6 g)), rounded to nearest even, saturating
    q.block_scales[b] = fp8_encode(static_cast<float>(block_max / (kE2m1Max * q.global_scale)), Fp8Format::e4m3,
                                   Overflow::saturate);
    const double scale = static_cast<double>(fp8_decode(q.block_scales[b], Fp8Format::e4m3)) * q.global_scale;
    // e_i = E2M1(x_i / (s_b g)); a block whose scale rounded to 0 keeps zero codes
    for (std::size_t i = 0; i < kBlock && scale > 0.0; ++i)
      q.elements[b * kBlock + i] = e2m1_encode(static_cast<float>(x(b * kBlock + i) / scale));
  }
  return q;
}

Tensor1 nvfp4_dequantize(const Nvfp4Tensor& q) {
  const char* fn = "nvfp4_dequantize";
  require(q.elements.size() == q.block_scales.size() * kBlock && !q.elements.empty(), fn, "q has ",
          q.elements.size(), " elements and ", q.block_scales.size(), " block scales: 16 elements per scale");
  Tensor1 y = Tensor1::from_shape({q.elements.size()});
  for (std::size_t b = 0; b < q.block_scales.size(); ++b) {
    const double scale = static_cast<double>(fp8_decode(q.block_scales[b], Fp8Format::e4m3)) * q.global_scale;
    require(!std::isnan(scale), fn, "block scale ", b, " is E4M3's NaN code");
    for (std::size_t i = 0; i < kBlock; ++i)
      y(b * kBlock + i) = static_cast<float>(e2m1_decode(q.elements[b * kBlock + i]) * scale);
  }
  return y;
}

double nvfp4_round_trip_rmse(const Tensor2& x) {
  require_nonempty("nvfp4_round_trip_rmse", "x", x);
  double sum = 0.0;
  for (std::size_t r = 0; r < x.shape()[0]; ++r) {
    const Tensor1 row = xt::view(x, r, xt::all());
    const Tensor1 back = nvfp4_dequantize(nvfp4_quantize(row));
    for (std::size_t c = 0; c < x.shape()[1]; ++c) sum += std::pow(double(x(r, c)) - double(back(c)), 2);
  }
  return std::sqrt(sum / static_cast<double>(x.size()));
}

}  // namespace tvlab::ref

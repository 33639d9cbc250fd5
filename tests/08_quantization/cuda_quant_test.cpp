// Chapter 08's CUDA kernels beyond the registry's suites: FP8 conversion by the hardware's
// intrinsics (__nv_cvt_float_to_fp8) against the reference's bit-level encoder, on every FP8 value,
// every midpoint between neighbours and the values just beside them, and beyond the range (device
// only); and the errors raised before any device call (everywhere).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/cuda/block_quant.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/ref/block_quant.hpp"
#include "tvlab/ref/fp8.hpp"

namespace tvlab::quant {
namespace {

using tvlab::testing::throws_error_naming;

TEST(Ch08Cuda, cuda_fp8_conversion_matches_the_reference) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  for (ref::Fp8Format format : {ref::Fp8Format::e4m3, ref::Fp8Format::e5m2})
    for (ref::Overflow overflow : {ref::Overflow::saturate, ref::Overflow::no_saturate}) {
      // every finite code's value, the midpoints between neighbours, one float either side, and
      // values beyond the range
      std::vector<float> values;
      std::vector<float> finite;
      for (int code = 0; code < 256; ++code) {
        const float v = ref::fp8_decode(static_cast<std::uint8_t>(code), format);
        if (std::isfinite(v)) finite.push_back(v);
      }
      std::sort(finite.begin(), finite.end());
      for (std::size_t i = 0; i < finite.size(); ++i) {
        values.push_back(finite[i]);
        if (i + 1 < finite.size()) {
          const float mid = 0.5f * (finite[i] + finite[i + 1]);
          values.insert(values.end(), {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)});
        }
      }
      const float top = ref::fp8_max(format);
      values.insert(values.end(), {top * 1.0625f, top * 1.125f, top * 4.0f, -top * 4.0f, INFINITY, -INFINITY, 1e30f});
      Tensor1 x = Tensor1::from_shape({values.size()});
      std::copy(values.begin(), values.end(), x.begin());
      const std::vector<std::uint8_t> codes = cuda::fp8_encode(x, format, overflow);
      for (std::size_t i = 0; i < values.size(); ++i)
        EXPECT_EQ(int(codes[i]), int(ref::fp8_encode(values[i], format, overflow)))
            << ref::fp8_name(format) << (overflow == ref::Overflow::saturate ? ", saturating" : ", not saturating")
            << ": x = " << values[i];
    }
}

TEST(Ch08Cuda, errors_come_before_any_device_call) {
  QuantizedMatrix truncated = ref::quantize(xt::ones<float>({std::size_t{1}, std::size_t{256}}), GgmlType::q4_K);
  truncated.bytes.pop_back();
  EXPECT_TRUE(throws_error_naming([&] { cuda::dequantize(truncated); }, {"dequantize", "q.bytes"}));
  const QuantizedMatrix w = ref::quantize(xt::ones<float>({std::size_t{2}, std::size_t{64}}), GgmlType::q4_0);
  EXPECT_TRUE(throws_error_naming([&] { cuda::quantized_gemv(w, Tensor1::from_shape({32})); },
                                  {"quantized_gemv", "x has 32 values"}));
  EXPECT_TRUE(throws_error_naming([&] { cuda::fp8_encode(Tensor1::from_shape({0}), ref::Fp8Format::e4m3, ref::Overflow::saturate); },
                                  {"fp8_encode", "x"}));
}

}  // namespace
}  // namespace tvlab::quant

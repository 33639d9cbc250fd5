// Chapter 08, FP8 conversion of whole tensors over every backend of the registry that has it (the
// CUDA one skips without a device): the reference's scalar encoder and decoder code by code, on
// every FP8 value, every midpoint between neighbours and the floats beside them, the boundary of
// the subnormals, values beyond the range, infinities, NaN, and random bit patterns of every
// exponent; a length that is not a multiple of a vector's sixteen lanes; and the errors.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/fp8.hpp"

namespace tvlab::quant {
namespace {

using tvlab::testing::throws_error_naming;

class Fp8Tensor : public ::testing::TestWithParam<Backend> {};

float from_bits(std::uint32_t bits) {
  float f = 0.0f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint32_t bits_of(float f) {
  std::uint32_t b = 0;
  std::memcpy(&b, &f, 4);
  return b;
}

// The hard values of a format, both signs, then random float bit patterns (every exponent, NaNs
// included); 4099 + ... values, not a multiple of 16.
Tensor1 hard_values(ref::Fp8Format format) {
  std::vector<float> v;
  std::vector<float> finite;
  for (int code = 0; code < 128; ++code) {
    const float value = ref::fp8_decode(static_cast<std::uint8_t>(code), format);
    if (std::isfinite(value)) finite.push_back(value);
  }
  for (std::size_t i = 0; i < finite.size(); ++i) {
    v.push_back(finite[i]);
    if (i + 1 < finite.size()) {
      const float mid = 0.5f * (finite[i] + finite[i + 1]);  // exact: neighbours differ by a power of two
      v.insert(v.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)});
    }
  }
  const float top = ref::fp8_max(format), smallest_normal = ref::fp8_decode(format == ref::Fp8Format::e4m3 ? 0x08 : 0x04, format);
  v.insert(v.end(), {top * 1.0625f, std::nextafter(top * 1.0625f, 0.0f), std::nextafter(top * 1.0625f, INFINITY), top * 1.125f,
                     top * 1.25f, top * 4.0f, 1e30f, std::numeric_limits<float>::max(), INFINITY,
                     std::numeric_limits<float>::quiet_NaN(), std::nextafter(smallest_normal, 0.0f),
                     std::nextafter(smallest_normal, INFINITY), std::numeric_limits<float>::denorm_min(),
                     std::numeric_limits<float>::min(), 0.0f});
  const std::size_t half = v.size();
  for (std::size_t i = 0; i < half; ++i) v.push_back(-v[i]);
  Rng rng(848);
  for (int i = 0; i < 4099; ++i) v.push_back(from_bits(static_cast<std::uint32_t>(rng.uniform() * 4294967296.0)));
  Tensor1 x = Tensor1::from_shape({v.size()});
  std::copy(v.begin(), v.end(), x.begin());
  return x;
}

TEST_P(Fp8Tensor, codes_match_the_reference_encoder_value_by_value) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  for (ref::Fp8Format format : {ref::Fp8Format::e4m3, ref::Fp8Format::e5m2})
    for (ref::Overflow overflow : {ref::Overflow::saturate, ref::Overflow::no_saturate}) {
      const Tensor1 x = hard_values(format);
      ASSERT_NE(x.size() % 16, 0u);
      const std::vector<std::uint8_t> codes = backend.fp8_encode(x, format, overflow);
      ASSERT_EQ(codes.size(), x.size());
      int mismatches = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const int expected = ref::fp8_encode(x(i), format, overflow);
        if (codes[i] != expected && ++mismatches <= 5)
          ADD_FAILURE() << backend.name << ", " << ref::fp8_name(format)
                        << (overflow == ref::Overflow::saturate ? ", saturating" : ", not saturating") << ": x = " << x(i)
                        << " (bits 0x" << std::hex << bits_of(x(i)) << ") gives 0x" << int(codes[i]) << ", the reference 0x"
                        << expected << std::dec;
      }
      EXPECT_EQ(mismatches, 0);
    }
}

// Every code, 300 times in a row (a length that is not a multiple of 16): the reference's value,
// bit for bit (NaN as the reference's quiet NaN; the sign of zero kept).
TEST_P(Fp8Tensor, values_match_the_reference_decoder_bit_for_bit) {
  const Backend& backend = GetParam();
  if (!backend.fp8_decode) GTEST_SKIP() << backend.name << " has no decoder";
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  for (ref::Fp8Format format : {ref::Fp8Format::e4m3, ref::Fp8Format::e5m2}) {
    std::vector<std::uint8_t> codes;
    for (int r = 0; r < 300; ++r)
      for (int c = 0; c < 256; ++c) codes.push_back(static_cast<std::uint8_t>((c + 7 * r) & 0xFF));
    codes.resize(codes.size() - 5);
    const Tensor1 y = backend.fp8_decode(codes, format);
    ASSERT_EQ(y.size(), codes.size());
    for (std::size_t i = 0; i < codes.size(); ++i)
      ASSERT_EQ(bits_of(y(i)), bits_of(ref::fp8_decode(codes[i], format)))
          << backend.name << ", " << ref::fp8_name(format) << ": code 0x" << std::hex << int(codes[i]);
  }
}

TEST_P(Fp8Tensor, bad_input_is_named) {
  const Backend& backend = GetParam();
  EXPECT_TRUE(throws_error_naming(
      [&] { backend.fp8_encode(Tensor1::from_shape({0}), ref::Fp8Format::e4m3, ref::Overflow::saturate); }, {"fp8_encode", "x"}));
  if (backend.fp8_decode) {
    EXPECT_TRUE(throws_error_naming([&] { backend.fp8_decode({}, ref::Fp8Format::e5m2); }, {"fp8_decode", "codes"}));
  }
}

INSTANTIATE_TEST_SUITE_P(Ch08, Fp8Tensor, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::fp8_encode)),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Fp8Tensor);

}  // namespace
}  // namespace tvlab::quant

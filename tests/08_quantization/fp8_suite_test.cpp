// Chapter 08, exercise 08.3 over the registry: the saturating FP8 E4M3 encoder of every backend that
// provides one against the specification's definition in double (fp8_oracle.hpp): every code back
// to itself, every rounding boundary, overflow, NaN, and floats across the whole range.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "fp8_oracle.hpp"

namespace tvlab::quant {
namespace {

using fp8_oracle::kE4m3;

std::string hex(unsigned code) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", code);
  return text;
}

class Fp8E4m3 : public ::testing::TestWithParam<Backend> {};

TEST_P(Fp8E4m3, every_code_encodes_back_to_itself) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "08.3");
  for (unsigned code = 0; code < 256; ++code) {
    if (fp8_oracle::is_nan_code(code, kE4m3)) continue;
    const auto v = static_cast<float>(fp8_oracle::value(code, kE4m3));
    EXPECT_EQ(hex(backend.fp8_encode_e4m3(v)), hex(code))
        << backend.name << ": " << v << " is exactly the code " << hex(code) << " (S.EEEE.MMM, bias 7)";
  }
}

// Between neighbours a < b: the midpoint to the even code, one float ulp either side to the nearer.
TEST_P(Fp8E4m3, rounding_boundaries_go_to_the_nearest_and_ties_to_even) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "08.3");
  for (unsigned code = 0; code < kE4m3.max_code; ++code)
    for (unsigned sign : {0u, 0x80u}) {
      const double a = fp8_oracle::formula(sign | code, kE4m3), b = fp8_oracle::formula(sign | (code + 1), kE4m3);
      const auto mid = static_cast<float>((a + b) / 2.0);
      const unsigned even = code % 2 == 0 ? code : code + 1;
      EXPECT_EQ(hex(backend.fp8_encode_e4m3(mid)), hex(sign | even))
          << backend.name << ": " << mid << " is halfway between " << a << " and " << b
          << "; a tie goes to the even code (mantissa ending in 0)";
      EXPECT_EQ(hex(backend.fp8_encode_e4m3(std::nextafter(mid, 0.0f))), hex(sign | code))
          << backend.name << ": just inside " << a << "'s half";
      EXPECT_EQ(hex(backend.fp8_encode_e4m3(std::nextafter(mid, sign ? -INFINITY : INFINITY))), hex(sign | (code + 1)))
          << backend.name << ": just inside " << b << "'s half";
    }
}

TEST_P(Fp8E4m3, overflow_saturates_and_nan_stays_nan) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "08.3");
  const char* hint = ": beyond 448 the saturating conversion gives +-448 (0x7E / 0xFE), never 0x7F (NaN)";
  for (float x : {448.0f, 464.0f, std::nextafter(464.0f, INFINITY), 480.0f, 1e6f, 3e38f, INFINITY}) {
    EXPECT_EQ(hex(backend.fp8_encode_e4m3(x)), "0x7E") << backend.name << ", x = " << x << hint;
    EXPECT_EQ(hex(backend.fp8_encode_e4m3(-x)), "0xFE") << backend.name << ", x = " << -x << hint;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(hex(backend.fp8_encode_e4m3(nan)), "0x7F") << backend.name << ": NaN is S.1111.111";
  EXPECT_EQ(hex(backend.fp8_encode_e4m3(-nan)), "0xFF") << backend.name << ": NaN keeps its sign";
  EXPECT_EQ(hex(backend.fp8_encode_e4m3(-0.0f)), "0x80") << backend.name << ": -0 keeps its sign";
  EXPECT_EQ(hex(backend.fp8_encode_e4m3(-0x1.0p-11f)), "0x80") << backend.name << ": too small, -0";
}

// Floats over every exponent (every 65521st bit pattern), against the search for the nearest code.
TEST_P(Fp8E4m3, floats_across_the_range_match_the_definition) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "08.3");
  int mismatches = 0;
  for (std::uint64_t bits = 0; bits < (1ull << 32); bits += 65521) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    const unsigned expected = fp8_oracle::encode(x, kE4m3, true), got = backend.fp8_encode_e4m3(x);
    if (got != expected && mismatches++ < 5)
      ADD_FAILURE() << backend.name << ": x = " << x << " gives " << hex(got) << ", the nearest code is " << hex(expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Ch08, Fp8E4m3,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::fp8_encode_e4m3)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Fp8E4m3);

}  // namespace
}  // namespace tvlab::quant

// Chapter 08, the OFP8 formats E4M3 and E5M2 (tvlab/ref/fp8.hpp) against their definitions: every
// one of the 256 codes of each format decodes to (-1)^s 2^(E - bias) (1 + m / 2^M) (or the subnormal
// form, or its special value), computed in double here; every code that is not NaN encodes back to
// itself; between every pair of neighbouring codes the midpoint goes to the even code and one float
// ulp either side to the nearer one; overflow follows the mode (saturating: +-max; not: NaN for E4M3,
// inf for E5M2); core's float_to_e4m3_bits / float_to_e5m2_bits agree where they define the same
// conversion.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "fp8_oracle.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/ref/fp8.hpp"

namespace tvlab::quant {
namespace {

using ref::Fp8Format;
using ref::Overflow;

struct Case {
  Fp8Format format;
  fp8_oracle::Format spec;
};

const Case kCases[] = {{Fp8Format::e4m3, fp8_oracle::kE4m3}, {Fp8Format::e5m2, fp8_oracle::kE5m2}};

std::string hex(unsigned code) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", code);
  return text;
}

std::uint8_t encode(float x, Fp8Format format, bool saturate) {
  return ref::fp8_encode(x, format, saturate ? Overflow::saturate : Overflow::no_saturate);
}

TEST(Ch08Fp8, every_code_decodes_to_the_formula) {
  for (const Case& c : kCases)
    for (unsigned code = 0; code < 256; ++code) {
      const double expected = fp8_oracle::value(code, c.spec);
      const float got = ref::fp8_decode(static_cast<std::uint8_t>(code), c.format);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got)) << ref::fp8_name(c.format) << " " << hex(code) << " is NaN, decoded " << got;
      } else {
        EXPECT_EQ(static_cast<double>(got), expected) << ref::fp8_name(c.format) << " " << hex(code);
        EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << ref::fp8_name(c.format) << " " << hex(code) << ": the sign";
      }
    }
}

TEST(Ch08Fp8, the_formats_landmarks) {
  // E4M3: 448 = 1.75 x 2^8 (S.1111.110), smallest normal 2^-6 (0x08), smallest subnormal 2^-9 (0x01)
  EXPECT_EQ(ref::fp8_decode(0x7E, Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(ref::fp8_decode(0x08, Fp8Format::e4m3), 0x1.0p-6f);
  EXPECT_EQ(ref::fp8_decode(0x01, Fp8Format::e4m3), 0x1.0p-9f);
  EXPECT_EQ(ref::fp8_decode(0x38, Fp8Format::e4m3), 1.0f);  // E = 7 = bias
  EXPECT_TRUE(std::isnan(ref::fp8_decode(0xFF, Fp8Format::e4m3)));
  EXPECT_EQ(ref::fp8_decode(0xF8, Fp8Format::e4m3), -256.0f);  // S.1111.000: a number, not inf
  // E5M2: 57344 = 1.75 x 2^15 (0x7B), inf 0x7C, smallest normal 2^-14, smallest subnormal 2^-16
  EXPECT_EQ(ref::fp8_decode(0x7B, Fp8Format::e5m2), 57344.0f);
  EXPECT_EQ(ref::fp8_decode(0x7C, Fp8Format::e5m2), INFINITY);
  EXPECT_EQ(ref::fp8_decode(0xFC, Fp8Format::e5m2), -INFINITY);
  EXPECT_EQ(ref::fp8_decode(0x04, Fp8Format::e5m2), 0x1.0p-14f);
  EXPECT_EQ(ref::fp8_decode(0x01, Fp8Format::e5m2), 0x1.0p-16f);
  EXPECT_EQ(ref::fp8_decode(0x3C, Fp8Format::e5m2), 1.0f);
  for (unsigned m = 0x7D; m <= 0x7F; ++m) EXPECT_TRUE(std::isnan(ref::fp8_decode(static_cast<std::uint8_t>(m), Fp8Format::e5m2)));
  EXPECT_EQ(ref::fp8_max(Fp8Format::e4m3), kE4m3Max);
  EXPECT_EQ(ref::fp8_max(Fp8Format::e5m2), kE5m2Max);
}

TEST(Ch08Fp8, every_code_that_is_not_nan_encodes_back_to_itself) {
  for (const Case& c : kCases)
    for (unsigned code = 0; code < 256; ++code) {
      if (fp8_oracle::is_nan_code(code, c.spec)) continue;
      const float v = ref::fp8_decode(static_cast<std::uint8_t>(code), c.format);
      const bool infinite = std::isinf(v);
      // E5M2's infinities survive only without saturation; with it they become +-max
      EXPECT_EQ(hex(encode(v, c.format, false)), hex(code)) << ref::fp8_name(c.format) << ", value " << v;
      EXPECT_EQ(hex(encode(v, c.format, true)), hex(infinite ? (code & 0x80) | c.spec.max_code : code))
          << ref::fp8_name(c.format) << ", value " << v << ", saturating";
    }
  EXPECT_EQ(hex(encode(-0.0f, Fp8Format::e4m3, true)), "0x80");  // -0 keeps its sign
  EXPECT_EQ(hex(encode(-0.0f, Fp8Format::e5m2, false)), "0x80");
}

// The neighbours a < b (magnitude codes c and c + 1, both finite, from 0 up to max): the midpoint
// (a + b) / 2 has at most 5 significant bits, so it is a float; it goes to the even code, and the
// floats just below and above it to c and c + 1. The same with the sign bit set.
TEST(Ch08Fp8, rounding_boundaries_between_every_pair_of_neighbours) {
  for (const Case& c : kCases)
    for (bool saturate : {true, false})
      for (unsigned code = 0; code < c.spec.max_code; ++code) {
        const double a = fp8_oracle::formula(code, c.spec), b = fp8_oracle::formula(code + 1, c.spec);
        const double mid = (a + b) / 2.0;
        const auto midf = static_cast<float>(mid);
        ASSERT_EQ(static_cast<double>(midf), mid) << "the midpoint is a float";
        const unsigned even = code % 2 == 0 ? code : code + 1;
        for (unsigned sign : {0u, 0x80u}) {
          const float s = sign ? -1.0f : 1.0f;
          const std::string where = std::string(ref::fp8_name(c.format)) + (saturate ? ", saturating" : "") +
                                    ", between " + std::to_string(s * a) + " and " + std::to_string(s * b);
          EXPECT_EQ(hex(encode(s * midf, c.format, saturate)), hex(sign | even)) << where << ": the midpoint, ties to even";
          EXPECT_EQ(hex(encode(s * std::nextafter(midf, 0.0f), c.format, saturate)), hex(sign | code))
              << where << ": one ulp below the midpoint";
          EXPECT_EQ(hex(encode(s * std::nextafter(midf, INFINITY), c.format, saturate)), hex(sign | (code + 1)))
              << where << ": one ulp above the midpoint";
        }
      }
}

TEST(Ch08Fp8, overflow_in_both_modes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // E4M3: max 448; the next step would be 480 (S.1111.111, NaN), so max + half ulp = 464 is a tie
  // that goes to the even 448 (mantissa 110) in both modes; above it the value overflows.
  for (bool saturate : {true, false}) {
    EXPECT_EQ(hex(encode(448.0f, Fp8Format::e4m3, saturate)), "0x7E");
    EXPECT_EQ(hex(encode(464.0f, Fp8Format::e4m3, saturate)), "0x7E") << "464 is a tie: 448 is the even code";
    EXPECT_EQ(hex(encode(-464.0f, Fp8Format::e4m3, saturate)), "0xFE");
    EXPECT_EQ(hex(encode(nan, Fp8Format::e4m3, saturate)), "0x7F");
    EXPECT_EQ(hex(encode(-nan, Fp8Format::e4m3, saturate)), "0xFF");
  }
  for (float x : {std::nextafter(464.0f, INFINITY), 480.0f, 1e6f, 3e38f, INFINITY}) {
    EXPECT_EQ(hex(encode(x, Fp8Format::e4m3, true)), "0x7E") << x << " saturates to 448";
    EXPECT_EQ(hex(encode(-x, Fp8Format::e4m3, true)), "0xFE") << -x << " saturates to -448";
    EXPECT_EQ(hex(encode(x, Fp8Format::e4m3, false)), "0x7F") << x << ": E4M3 has no inf, overflow is NaN";
    EXPECT_EQ(hex(encode(-x, Fp8Format::e4m3, false)), "0xFF") << -x;
  }
  // E5M2: max 57344 = 1.11b x 2^15; the next step would be 2^16, so max + half ulp = 61440 is a tie
  // that goes to the even 2^16 (mantissa 00), beyond the range; just below it, to 57344.
  for (bool saturate : {true, false}) {
    EXPECT_EQ(hex(encode(57344.0f, Fp8Format::e5m2, saturate)), "0x7B");
    EXPECT_EQ(hex(encode(std::nextafter(61440.0f, 0.0f), Fp8Format::e5m2, saturate)), "0x7B");
    EXPECT_EQ(hex(encode(nan, Fp8Format::e5m2, saturate)), "0x7E");
    EXPECT_TRUE(std::isnan(ref::fp8_decode(encode(-nan, Fp8Format::e5m2, saturate), Fp8Format::e5m2)));
  }
  for (float x : {61440.0f, 65536.0f, 1e6f, 3e38f, INFINITY}) {
    EXPECT_EQ(hex(encode(x, Fp8Format::e5m2, true)), "0x7B") << x << " saturates to 57344";
    EXPECT_EQ(hex(encode(-x, Fp8Format::e5m2, true)), "0xFB") << -x;
    EXPECT_EQ(hex(encode(x, Fp8Format::e5m2, false)), "0x7C") << x << " overflows to inf";
    EXPECT_EQ(hex(encode(-x, Fp8Format::e5m2, false)), "0xFC") << -x;
  }
}

TEST(Ch08Fp8, underflow_to_signed_zero) {
  // half the smallest subnormal is a tie between 0 (even) and the code 1; below it, zero
  EXPECT_EQ(hex(encode(0x1.0p-10f, Fp8Format::e4m3, true)), "0x00");
  EXPECT_EQ(hex(encode(-0x1.0p-10f, Fp8Format::e4m3, true)), "0x80");
  EXPECT_EQ(hex(encode(0x1.0p-17f, Fp8Format::e5m2, false)), "0x00");
  EXPECT_EQ(hex(encode(0x1.8p-17f, Fp8Format::e5m2, false)), "0x01");
  EXPECT_EQ(hex(encode(std::numeric_limits<float>::denorm_min(), Fp8Format::e4m3, true)), "0x00");
  EXPECT_EQ(hex(encode(-std::numeric_limits<float>::min(), Fp8Format::e5m2, false)), "0x80");
}

// Floats spread over every exponent (every 65521st bit pattern: about 65 000 values, NaNs and
// infinities included) against the search over all codes in double.
TEST(Ch08Fp8, floats_across_the_range_match_the_nearest_code_by_search) {
  for (const Case& c : kCases)
    for (bool saturate : {true, false}) {
      int mismatches = 0;
      for (std::uint64_t bits = 0; bits < (1ull << 32); bits += 65521) {
        const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
        const unsigned expected = fp8_oracle::encode(x, c.spec, saturate);
        const unsigned got = encode(x, c.format, saturate);
        if (got != expected && mismatches++ < 5)
          ADD_FAILURE() << ref::fp8_name(c.format) << (saturate ? ", saturating" : "") << ": x = " << x << " ("
                        << hex(static_cast<unsigned>(bits >> 24)) << "...) gives " << hex(got) << ", the nearest code is "
                        << hex(expected);
      }
    }
}

// core/dtype.hpp's conversions (rounding in double) define the same thing: float_to_e4m3_bits is the
// saturating E4M3 conversion, float_to_e5m2_bits the non-saturating E5M2 one, and their decoders the
// same values.
TEST(Ch08Fp8, agrees_with_core_dtype_conversions) {
  for (unsigned code = 0; code < 256; ++code) {
    const auto c8 = static_cast<std::uint8_t>(code);
    const float e4 = ref::fp8_decode(c8, Fp8Format::e4m3), e5 = ref::fp8_decode(c8, Fp8Format::e5m2);
    if (!std::isnan(e4)) EXPECT_EQ(e4, e4m3_bits_to_float(c8)) << hex(code);
    else EXPECT_TRUE(std::isnan(e4m3_bits_to_float(c8))) << hex(code);
    if (!std::isnan(e5)) EXPECT_EQ(e5, e5m2_bits_to_float(c8)) << hex(code);
    else EXPECT_TRUE(std::isnan(e5m2_bits_to_float(c8))) << hex(code);
  }
  int mismatches = 0;
  for (std::uint64_t bits = 0; bits < (1ull << 32); bits += 4099) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    const unsigned e4 = ref::fp8_encode(x, Fp8Format::e4m3, Overflow::saturate), core4 = float_to_e4m3_bits(x);
    const unsigned e5 = ref::fp8_encode(x, Fp8Format::e5m2, Overflow::no_saturate), core5 = float_to_e5m2_bits(x);
    if ((e4 != core4 || e5 != core5) && mismatches++ < 5)
      ADD_FAILURE() << "x = " << x << ": E4M3 " << hex(e4) << " (core " << hex(core4) << "), E5M2 " << hex(e5)
                    << " (core " << hex(core5) << ")";
  }
}

}  // namespace
}  // namespace tvlab::quant

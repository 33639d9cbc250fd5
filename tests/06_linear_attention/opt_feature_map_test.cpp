// Chapter 06: the optimized feature maps (vectorised, with xsimd's exp) against the reference's,
// for widths below, at and past one SIMD register, including inputs far into exp's tails.

#include <gtest/gtest.h>

#include <limits>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/linear_attention.hpp"
#include "tvlab/ref/linear_attention.hpp"

namespace tvlab {
namespace {

using tvlab::testing::throws_error_naming;

// elu(x) + 1 = e^x below 0: a float exp is within 2 ulps (2.4e-7 relative); ReLU and the identity
// are exact. Far below (x = -100) both give 0 or a denormal: 1.2e-38 absolute.
TEST(Ch06FeatureMap, optimized_maps_match_the_reference) {
  Rng rng(640);
  for (const std::size_t d : {std::size_t{5}, std::size_t{16}, std::size_t{37}}) {
    Tensor3 x = rng.normal_tensor(3, 1000, d, 0.0, 3.0);
    x(0, 0, 0) = -100.0f;
    x(0, 0, 1) = 80.0f;
    for (const FeatureMap map : {FeatureMap::elu_plus_one, FeatureMap::relu, FeatureMap::identity}) {
      const Tensor3 expected = ref::feature_map(x, map), got = opt::feature_map(x, map);
      EXPECT_TRUE(xt::allclose(got, expected, 2.4e-7, 1.2e-38)) << to_string(map) << ", d = " << d;
    }
  }
  Tensor3 bad = rng.normal_tensor(1, 3, 4);
  bad(0, 2, 3) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { opt::feature_map(bad, FeatureMap::relu); }, {"feature_map", "x", "non-finite"}));
}

}  // namespace
}  // namespace tvlab

// Chapter 08, the 2:4-sparse matrix-vector product over every backend of the registry that has
// one: against the double-precision product of the dense matrix the 2:4 matrix stands for, within
// the float rounding of a sum, and its errors (every backend runs the reference's checks).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/pruning.hpp"

namespace tvlab::quant {
namespace {

using tvlab::testing::throws_error_naming;

class Sparse24Gemv : public ::testing::TestWithParam<Backend> {};

Tensor1 vector_of(const Tensor2& row) {
  Tensor1 x = Tensor1::from_shape({row.size()});
  std::copy(row.begin(), row.end(), x.begin());
  return x;
}

// 37 rows; 108 columns (54 kept values a row: not a multiple of the 16 or 8 an optimized kernel
// takes at once, so its one-by-one tail runs), then 4096. A float sum of n terms taken in any
// order, in at most 8 partial sums of at most n / 8 terms plus their reduction, is within
// (n / 8 + 8) u sum |terms| of the exact sum (u = 2^-24, the standard bound gamma_k <= 1.01 k u);
// (n / 8 + 20) u covers every backend's order.
TEST_P(Sparse24Gemv, equals_the_dense_product_of_the_pruned_matrix_to_float_rounding) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{37, 108}, {9, 4096}}) {
    Rng rng(845 + cols);
    const ref::Sparse24 s = ref::prune_2_4(rng.normal_matrix(rows, cols));
    const Tensor2 dense = ref::densify(s);
    const Tensor1 x = vector_of(rng.normal_matrix(1, cols));
    const Tensor1 y = backend.sparse_2_4_gemv(s, x);
    ASSERT_EQ(y.size(), rows);
    const double kept = cols / 2.0, u = std::ldexp(1.0, -24);
    for (std::size_t r = 0; r < rows; ++r) {
      double exact = 0.0, magnitude = 0.0;
      for (std::size_t c = 0; c < cols; ++c) {
        exact += double(dense(r, c)) * x(c);
        magnitude += std::fabs(double(dense(r, c)) * x(c));
      }
      EXPECT_LE(std::fabs(y(r) - exact), (kept / 8.0 + 20.0) * u * magnitude)
          << backend.name << ", " << rows << " x " << cols << ": row " << r << " gives " << y(r) << ", the dense product "
          << exact << "; a kernel that fetches the wrong x for a position or drops the tail lands far outside";
    }
  }
}

// The defects sit at values 20..23 of 64 per row (inside an optimized kernel's vector loop) and
// at 2..5 of 4 per row (its one-by-one tail).
TEST_P(Sparse24Gemv, bad_input_is_named) {
  const Backend& backend = GetParam();
  for (std::size_t cols : {8, 128}) {
    Rng rng(846 + cols);
    const ref::Sparse24 s = ref::prune_2_4(rng.normal_matrix(2, cols));
    Tensor1 x = vector_of(rng.normal_matrix(1, cols));
    const std::size_t at = cols == 8 ? 2 : 20;
    const std::string pair = "s.positions[" + std::to_string(at) + ".." + std::to_string(at + 1) + "]";
    const std::string next = "s.positions[" + std::to_string(at + 2) + ".." + std::to_string(at + 3) + "] = 1, 1";
    EXPECT_TRUE(throws_error_naming([&] { backend.sparse_2_4_gemv(s, Tensor1::from_shape({4})); },
                                    {"sparse_2_4_gemv", "x has 4 values", "s.cols = " + std::to_string(cols)}));
    x(5) = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(throws_error_naming([&] { backend.sparse_2_4_gemv(s, x); }, {"sparse_2_4_gemv", "x", "non-finite"}));
    x(5) = 1.0f;
    ref::Sparse24 short_values = s;
    short_values.values.pop_back();
    EXPECT_TRUE(throws_error_naming([&] { backend.sparse_2_4_gemv(short_values, x); }, {"sparse_2_4_gemv", "s is malformed"}));
    ref::Sparse24 outside = s;
    outside.positions[at + 1] = 4;
    EXPECT_TRUE(throws_error_naming([&] { backend.sparse_2_4_gemv(outside, x); }, {"sparse_2_4_gemv", pair, "not 0 to 3"}));
    ref::Sparse24 repeated = s;
    repeated.positions[at + 2] = repeated.positions[at + 3] = 1;
    EXPECT_TRUE(throws_error_naming([&] { backend.sparse_2_4_gemv(repeated, x); }, {"sparse_2_4_gemv", next, "must increase"}));
    ref::Sparse24 not_finite = s;
    not_finite.values[at + 1] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(
        throws_error_naming([&] { backend.sparse_2_4_gemv(not_finite, x); }, {"sparse_2_4_gemv", "s.values", "non-finite"}));
  }
}

INSTANTIATE_TEST_SUITE_P(Ch08, Sparse24Gemv,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::sparse_2_4_gemv)),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Sparse24Gemv);

}  // namespace
}  // namespace tvlab::quant

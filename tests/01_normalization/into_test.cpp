// opt::layer_norm_into / opt::rms_norm_into write into a caller's buffer. Pre-filling that buffer
// with NaN catches any element the kernel forgets to write (including the rows redone in double).

#include <gtest/gtest.h>

#include <limits>

#include "../common/testing.hpp"
#include "oracle.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/normalization.hpp"

namespace tvlab::ch01 {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;

TEST(OptInto, writes_every_element_of_a_nan_filled_buffer) {
  Rng rng(91);
  Tensor2 x = rng.normal_matrix(37, 129);
  for (std::size_t j = 0; j < 129; ++j) x(5, j) *= 1e20f;  // one row takes the double path
  const Tensor1 gamma = rng.normal_vector(129, 1, 0.2), beta = rng.normal_vector(129, 0, 0.2);
  const DTensor1 beta_d = to_double(beta);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Float rows of length 129 with O(1) gain: as in the forward tests (condition ~ max|x| / sigma <= 5).
  const tvlab::Tolerance tol{6 * reduction_rtol(129), reduction_rtol(129)};

  Tensor2 y = xt::zeros<float>({37, 129});
  y.fill(static_cast<float>(nan));
  opt::layer_norm_into(x, gamma, beta, 1e-5, y);
  EXPECT_TRUE(matches(y, norm_oracle(to_double(x), to_double(gamma), &beta_d, 1e-5), tol,
                      {"opt::layer_norm_into, output pre-filled with NaN", {"t", "j"}, 91, "", "every row must be written"}));
  y.fill(static_cast<float>(nan));
  opt::rms_norm_into(x, gamma, 1e-6, y);
  EXPECT_TRUE(matches(y, norm_oracle(to_double(x), to_double(gamma), nullptr, 1e-6), tol,
                      {"opt::rms_norm_into, output pre-filled with NaN", {"t", "j"}, 91, "", "every row must be written"}));
}

TEST(OptInto, resizes_a_buffer_of_the_wrong_shape) {
  Rng rng(92);
  const Tensor2 x = rng.normal_matrix(3, 8);
  const Tensor1 gamma = xt::ones<float>({8});
  Tensor2 y = xt::zeros<float>({2, 2});
  opt::rms_norm_into(x, gamma, 1e-6, y);
  EXPECT_EQ(y.shape()[0], 3u);
  EXPECT_EQ(y.shape()[1], 8u);
}

}  // namespace
}  // namespace tvlab::ch01

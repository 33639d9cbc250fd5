// The template chapter's suites, run over every backend in its registry (and, in the exercise
// program, over the student's alone): equivalence with a double-precision oracle, a property,
// and bad input. A chapter copied from the template writes one such suite per function.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/attention_oracle.hpp"
#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::kv {
namespace {

using tvlab::testing::Context;
using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

struct SoftmaxCase {
  const char* label;
  std::size_t rows, cols;
};
void PrintTo(const SoftmaxCase& c, std::ostream* out) { *out << c.label; }

class SoftmaxCases : public ::testing::TestWithParam<std::tuple<Backend, SoftmaxCase>> {};

TEST_P(SoftmaxCases, matches_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  // Names the exercise in every failure of the student's code (and lets `make exercises` tell
  // which exercises are solved): every test of a function that is an exercise starts with it.
  TVLAB_EXERCISE(backend, "99.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const unsigned long long seed = 11 + c.rows * 7 + c.cols;
  Rng rng(seed);
  const Tensor2 x = rng.normal_matrix(c.rows, c.cols, 0.0, 3.0);
  // A row reduction of length cols: each weight carries a few float roundings of exp and the sum.
  const Tolerance tol{2e-6, reduction_rtol(c.cols)};
  EXPECT_TRUE(matches(backend.softmax(x), tvlab::testing::softmax_oracle(x), tol,
                      {std::string("softmax, ") + c.label, {"row", "col"}, seed,
                       std::string("tvlab ") + TVLAB_CHAPTER_NAME + " --step --backend " + backend.name,
                       "$y_{ij} = e^{x_{ij} - m_i} / \\sum_k e^{x_{ik} - m_i}$ with $m_i = \\max_k x_{ik}$: "
                       "subtract the row maximum before exp"}));
}

const SoftmaxCase kCases[] = {{"one element", 1, 1}, {"odd width", 5, 37}, {"wide rows", 3, 1000}};
INSTANTIATE_TEST_SUITE_P(Example, SoftmaxCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::softmax)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());

class Softmax : public ::testing::TestWithParam<Backend> {};

TEST_P(Softmax, rows_sum_to_one) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "99.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(3);
  const Tensor2 p = backend.softmax(rng.normal_matrix(4, 50, 0.0, 5.0));
  for (std::size_t i = 0; i < 4; ++i) {
    double sum = 0.0;
    for (std::size_t j = 0; j < 50; ++j) sum += p(i, j);
    EXPECT_NEAR(sum, 1.0, 50 * 1.2e-7) << "softmax of a 4 x 50 input: row " << i << " of " << backend.name
                                         << "'s weights sums to " << sum << ", not 1";
  }
}

TEST_P(Softmax, rejects_nan_naming_the_input) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "99.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Tensor2 x = xt::zeros<float>({2, 3});
  x(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { backend.softmax(x); }, {"x"})) << "x [2, 3] with NaN at (1, 2)";
}

INSTANTIATE_TEST_SUITE_P(Example, Softmax, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::softmax)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::kv

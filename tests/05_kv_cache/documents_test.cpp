// The template chapter's document numbers, computed from their inputs: the first weight of
// softmax([1, 2, 3]) is e / (e + e^2 + e^3) = 1 / (1 + e + e^2).

#include <gtest/gtest.h>

#include <cmath>

#include "backends.hpp"

namespace tvlab::kv {
namespace {

TEST(ExampleDocuments, first_weight_of_softmax_1_2_3) {
  const Tensor2 x = {{1.0f, 2.0f, 3.0f}};
  const double expected = 1.0 / (1.0 + std::exp(1.0) + std::exp(2.0));  // 0.0900306
  EXPECT_NEAR(reference_backend(backends()).softmax(x)(0, 0), expected, 1e-7);
}

}  // namespace
}  // namespace tvlab::kv

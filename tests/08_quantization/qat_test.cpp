// Chapter 08, quantization-aware training: fake quantization and the straight-through estimator
// by their definitions, and the experiment's claim (000 L255: QAT recovers what PTQ loses), checked
// on its seeded data at 4 and 2 bits.

#include <gtest/gtest.h>

#include <cmath>

#include "../common/testing.hpp"
#include "tvlab/analysis/qat.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

TEST(Ch08Qat, fake_quantization_and_the_straight_through_gradient) {
  // 4 bits: Q = 7, scale 0.5: the grid -3.5 .. 3.5 in steps of 0.5
  EXPECT_EQ(fake_quantize(1.26, 0.5, 4), 1.5);
  EXPECT_EQ(fake_quantize(0.25, 0.5, 4), 0.0) << "0.5 steps: a tie goes to the even code 0";
  EXPECT_EQ(fake_quantize(0.75, 0.5, 4), 1.0) << "1.5 steps: a tie goes to the even code 2";
  EXPECT_EQ(fake_quantize(9.0, 0.5, 4), 3.5) << "clipped to Q s";
  EXPECT_EQ(fake_quantize(-9.0, 0.5, 4), -3.5);
  EXPECT_EQ(straight_through_gradient(3.4, 0.5, 4), 1.0);
  EXPECT_EQ(straight_through_gradient(3.5, 0.5, 4), 1.0) << "the end of the range is inside";
  EXPECT_EQ(straight_through_gradient(3.6, 0.5, 4), 0.0) << "a clipped weight gets no gradient";
  EXPECT_EQ(straight_through_gradient(-3.6, 0.5, 4), 0.0);
}

// On held-out data, QAT's weights beat PTQ's (QAT keeps its weights of lowest training error, PTQ's
// among the candidates, so only the held-out data can show it doing worse), and the float layer is
// better than both.
TEST(Ch08Qat, qat_recovers_part_of_what_ptq_loses) {
  for (int bits : {4, 2}) {
    const QatResult r = qat_experiment(bits, 846);
    EXPECT_LT(r.float_error, 1e-3) << bits << " bits: the float layer fits the data to its noise";
    EXPECT_GT(r.ptq_error, r.float_error);
    EXPECT_LT(r.qat_error, r.ptq_error) << bits << " bits: PTQ " << r.ptq_error << ", QAT " << r.qat_error;
  }
}

TEST(Ch08Qat, bad_input_is_named) {
  EXPECT_TRUE(throws_error_naming([] { fake_quantize(1.0, 0.5, 1); }, {"fake_quantize", "bits (1)"}));
  EXPECT_TRUE(throws_error_naming([] { fake_quantize(1.0, 0.0, 4); }, {"fake_quantize", "scale (0)"}));
  EXPECT_TRUE(throws_error_naming([] { qat_experiment(9, 1); }, {"qat_experiment", "bits (9)"}));
}

}  // namespace
}  // namespace tvlab::analysis

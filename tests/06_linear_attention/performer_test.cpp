// Chapter 06's Performer (FAVOR+): the random features and the positive random feature map by hand,
// the draws' plumbing (seeds, orthogonal blocks, lengths), the attention against linear attention
// over the same features, and the statistical claims of the paper measured over many seeded draws:
// phi+(x) . phi+(y) is an unbiased estimate of exp(x^T y) (Lemma 1), its error falls as m^{-1/2}
// with Lemma 2's constant, orthogonal features lower its mean squared error, fixed lengths sqrt(d)
// bias it low, and Performer attention approaches softmax attention as m grows.
//
// The statistical tests use fixed seeds, so each passes or fails the same way on every run; the
// false-failure probability each one states is the chance that a set of seeds chosen blindly would
// have failed although the code is right.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/linear_attention.hpp"
#include "tvlab/ref/performer.hpp"

namespace tvlab::ref {
namespace {

using tvlab::testing::throws_error_naming;

// Rows of one head: [1, rows, d].
Tensor3 head_of(const std::vector<std::vector<float>>& rows) {
  Tensor3 t = Tensor3::from_shape({1, rows.size(), rows.front().size()});
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t c = 0; c < rows[i].size(); ++c) t(0, i, c) = rows[i][c];
  return t;
}

DTensor2 matrix_of(const std::vector<std::vector<double>>& rows) {
  DTensor2 w = DTensor2::from_shape({rows.size(), rows.front().size()});
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0; c < rows[r].size(); ++c) w(r, c) = rows[r][c];
  return w;
}

PerformerFeatures hand_built(const std::vector<std::vector<double>>& rows) {
  PerformerFeatures features;
  features.w = matrix_of(rows);
  return features;
}

double dot(const double* a, const double* b, std::size_t d) {
  double sum = 0.0;
  for (std::size_t c = 0; c < d; ++c) sum += a[c] * b[c];
  return sum;
}

// ---------------------------------------------------------------- the feature map by hand

// W = [[1, 0], [0, 1], [1, -1]] and x = [0.5, -1]: ||x||^2 / 2 = 0.625 and omega^T x = 0.5, -1, 1.5, so
// phi+(x) = e^{-0.625} / sqrt(3) [e^{0.5}, e^{-1}, e^{1.5}]. The one rounding to float is within
// 2^-24 relative.
TEST(Performer, phi_plus_of_a_known_x_by_hand) {
  const PerformerFeatures features = hand_built({{1.0, 0.0}, {0.0, 1.0}, {1.0, -1.0}});
  const Tensor3 phi = performer_feature_map(head_of({{0.5f, -1.0f}, {0.0f, 0.0f}}), features);
  ASSERT_EQ(shape_of(phi), (std::vector<std::size_t>{1, 2, 3}));
  const double h = std::exp(-0.625) / std::sqrt(3.0);
  const double expected[3] = {h * std::exp(0.5), h * std::exp(-1.0), h * std::exp(1.5)};
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_NEAR(phi(0, 0, r), expected[r], 6e-8 * expected[r])
        << "phi+(x)_" << r
        << " = exp(omega_r^T x - |x|^2/2) / sqrt(m); the usual mistake: the factor exp(-|x|^2/2) left out";
    // x = 0: every feature is 1 / sqrt(m)
    EXPECT_NEAR(phi(0, 1, r), 1.0 / std::sqrt(3.0), 6e-8) << "phi+(0)_" << r;
  }
}

// ---------------------------------------------------------------- the draws' plumbing

TEST(Performer, a_seed_gives_the_same_features_and_another_seed_new_ones) {
  for (const auto kind : {RandomFeatureKind::iid, RandomFeatureKind::orthogonal})
    for (const auto norms : {RowNorms::chi, RowNorms::sqrt_d}) {
      const std::string what = to_string(kind) + ", " + to_string(norms);
      const PerformerFeatures a = draw_performer_features(10, 4, kind, norms, 7);
      const PerformerFeatures b = draw_performer_features(10, 4, kind, norms, 7);
      const PerformerFeatures c = draw_performer_features(10, 4, kind, norms, 8);
      ASSERT_EQ(shape_of(a.w), (std::vector<std::size_t>{10, 4})) << what;
      EXPECT_EQ(a.num_features(), 10u);
      EXPECT_EQ(a.head_dim(), 4u);
      EXPECT_TRUE(a.kind == kind && a.norms == norms && a.seed == 7u) << what << ": the recipe is recorded";
      EXPECT_TRUE(a.w == b.w) << what << ": the same seed must give the same W";
      std::size_t equal = 0;
      for (std::size_t i = 0; i < a.w.size(); ++i) equal += a.w.data()[i] == c.w.data()[i];
      EXPECT_EQ(equal, 0u) << what << ": another seed must give new rows (a redraw)";
    }
}

// m = 10, d = 4: blocks of 4, 4 and 2 rows. Within a block the rows are orthogonal to rounding
// (Gram-Schmidt applied twice in double: |w_r . w_s| <= 1e-12 |w_r| |w_s|); each row keeps the length
// of the Gaussian row it came from (the iid draw of the same seed), or has length sqrt(d); the first
// row of a block is that Gaussian row itself. Rows of different blocks are independent, not orthogonal.
TEST(Performer, orthogonal_blocks_are_orthogonal_and_keep_their_lengths) {
  const std::size_t m = 10, d = 4;
  const PerformerFeatures iid = draw_performer_features(m, d, RandomFeatureKind::iid, RowNorms::chi, 11);
  const PerformerFeatures orf = draw_performer_features(m, d, RandomFeatureKind::orthogonal, RowNorms::chi, 11);
  const PerformerFeatures fixed = draw_performer_features(m, d, RandomFeatureKind::orthogonal, RowNorms::sqrt_d, 11);
  const auto row = [](const PerformerFeatures& f, std::size_t r) { return &f.w(r, 0); };
  const auto length = [&](const PerformerFeatures& f, std::size_t r) {
    return std::sqrt(dot(row(f, r), row(f, r), d));
  };
  for (const auto* features : {&orf, &fixed})
    for (std::size_t r = 0; r < m; ++r)
      for (std::size_t s = r + 1; s < m; ++s) {
        const double cosine =
            dot(row(*features, r), row(*features, s), d) / (length(*features, r) * length(*features, s));
        if (r / d == s / d) {
          EXPECT_LE(std::fabs(cosine), 1e-12)
              << to_string(features->norms) << ": rows " << r << " and " << s << " of one block must be orthogonal";
        } else if (features == &orf && r == 0 && s == d) {
          EXPECT_GT(std::fabs(cosine), 1e-3) << "rows of different blocks are independent: orthogonal only by chance";
        }
      }
  for (std::size_t r = 0; r < m; ++r) {
    EXPECT_NEAR(length(orf, r), length(iid, r), 1e-12 * length(iid, r)) << "row " << r << " keeps its chi(d) length";
    EXPECT_NEAR(length(fixed, r), std::sqrt(double(d)), 1e-12) << "row " << r << " of RowNorms::sqrt_d";
    EXPECT_NEAR(length(draw_performer_features(m, d, RandomFeatureKind::iid, RowNorms::sqrt_d, 11), r), 2.0, 1e-12);
  }
  for (const std::size_t first : {std::size_t{0}, d, 2 * d})
    for (std::size_t c = 0; c < d; ++c)
      EXPECT_NEAR(orf.w(first, c), iid.w(first, c), 1e-15 * length(iid, first))
          << "the first row of the block at " << first
          << " is its Gaussian row (divided by its length, then multiplied)";
}

// ---------------------------------------------------------------- statistics of the kernel estimate

// Three pairs (x, y) of width d = 4, the inputs of phi+ as attention gives them (already scaled by
// d^{-1/4}): |x|, |y| between 0.56 and 0.98, x^T y of either sign, and ||x + y||^2 between 1.05 and
// 1.69. The variance of one feature's term is exp(2 x^T y)(exp(||x + y||^2) - 1) (Lemma 2): it is
// log-normal, heavy-tailed when ||x + y||^2 is large, and these pairs keep it light enough for the
// normal approximations below.
struct Pair {
  std::vector<float> x, y;
};
const Pair kPairs[] = {
    {{0.5f, 0.4f, -0.3f, 0.2f}, {0.3f, 0.6f, 0.1f, -0.3f}},
    {{0.9f, -0.2f, 0.3f, 0.1f}, {-0.5f, 0.4f, 0.6f, -0.3f}},
    {{0.2f, 0.3f, -0.8f, 0.4f}, {0.5f, -0.1f, 0.1f, 0.2f}},
};
constexpr std::size_t kPairCount = sizeof(kPairs) / sizeof(kPairs[0]);
constexpr std::size_t kWidth = 4;

// Every pair as one head: head p holds x_p (row 0) and y_p (row 1), so one call maps them all.
Tensor3 pairs_tensor(const Pair* pairs, std::size_t count) {
  Tensor3 t = Tensor3::from_shape({count, 2, kWidth});
  for (std::size_t p = 0; p < count; ++p)
    for (std::size_t c = 0; c < kWidth; ++c) {
      t(p, 0, c) = pairs[p].x[c];
      t(p, 1, c) = pairs[p].y[c];
    }
  return t;
}

double inner(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (std::size_t c = 0; c < a.size(); ++c) sum += double(a[c]) * double(b[c]);
  return sum;
}
double squared_norm_of_sum(const Pair& p) { return inner(p.x, p.x) + inner(p.y, p.y) + 2.0 * inner(p.x, p.y); }

// phi+(x_p) . phi+(y_p) for every pair p, with features of the given recipe and seed.
std::vector<double> estimates(const Tensor3& pairs, std::size_t m, RandomFeatureKind kind, RowNorms norms,
                              std::uint64_t seed) {
  const Tensor3 phi = performer_feature_map(pairs, draw_performer_features(m, kWidth, kind, norms, seed));
  std::vector<double> out(pairs.shape()[0], 0.0);
  for (std::size_t p = 0; p < out.size(); ++p)
    for (std::size_t r = 0; r < m; ++r) out[p] += double(phi(p, 0, r)) * double(phi(p, 1, r));
  return out;
}

// The sample mean of n values and its standard error, sqrt(sample variance / n).
struct MeanAndError {
  double sum = 0.0, sum_of_squares = 0.0;
  std::size_t n = 0;
  void add(double value) {
    sum += value;
    sum_of_squares += value * value;
    ++n;
  }
  double mean() const { return sum / double(n); }
  double standard_error() const {
    const double variance = (sum_of_squares - double(n) * mean() * mean()) / double(n - 1);
    return std::sqrt(std::max(variance, 0.0) / double(n));
  }
};

// Statistical. Lemma 1: E[phi+(x)^T phi+(y)] = exp(x^T y), for iid rows and for orthogonal rows
// with chi(d) lengths (each row is still marginally N(0, I_d)). Over 2000 independent draws of
// m = 16 features the mean must lie within 4 standard errors (estimated from the same draws) of
// exp(x^T y). The mean of 2000 such draws is close to normal (the skewness of one term, 8 to 15 for
// these pairs, divided by sqrt(2000 * 16)), so a correct estimator fails one check with probability
// 2(1 - Phi(4)) = 6.3e-5, and one of the six with about 4e-4. Over 1000 other sets of seeds, the
// t statistics had mean -0.02 to -0.09, standard deviation 0.99 to 1.03 and never left [-3.8, 3.6];
// here they are -1.9 to 0.0 for iid rows and -3.0 to 0.2 for orthogonal ones. The usual mistakes
// this catches: the factor exp(-||x||^2/2) left out (the mean becomes
// exp(x^T y + (||x||^2 + ||y||^2)/2)), a wrong 1/sqrt(m), rows not of unit variance.
TEST(PerformerStatistics, phi_plus_is_an_unbiased_estimate_of_exp_x_dot_y) {
  const Tensor3 pairs = pairs_tensor(kPairs, kPairCount);
  const std::size_t draws = 2000, m = 16;
  for (const auto kind : {RandomFeatureKind::iid, RandomFeatureKind::orthogonal}) {
    std::vector<MeanAndError> stats(kPairCount);
    for (std::size_t s = 0; s < draws; ++s) {
      const auto e = estimates(pairs, m, kind, RowNorms::chi, 100000 + s);
      for (std::size_t p = 0; p < kPairCount; ++p) stats[p].add(e[p]);
    }
    for (std::size_t p = 0; p < kPairCount; ++p) {
      const double exact = std::exp(inner(kPairs[p].x, kPairs[p].y));
      EXPECT_LE(std::fabs(stats[p].mean() - exact), 4.0 * stats[p].standard_error())
          << to_string(kind) << " features, pair " << p << ": mean of " << draws << " estimates " << stats[p].mean()
          << ", exp(x^T y) = " << exact << ", standard error " << stats[p].standard_error();
    }
  }
}

// Statistical. For iid rows phi+(x)^T phi+(y) averages m independent terms, so its mean squared
// error is the variance of one term over m, exactly (Lemma 2):
//   MSE_m = exp(2 x^T y) (exp(||x + y||^2) - 1) / m,
// and the RMS error halves each time m is multiplied by 4. Measured over 2000 draws for each of
// m = 16, 64, 256 (independent seeds), each ratio of successive RMS errors must lie in [1.6, 2.5]
// and each RMS error within 20% of Lemma 2's. The RMS of 2000 draws has a relative standard
// deviation of about sqrt((kurtosis - 1) / 2000) / 2, at most 5% here (the kurtosis of a term's
// square, 1 + 111 / m for ||x + y||^2 near 1.7, at m = 16), so 20% is 4 of them; the ratios of two
// such RMS errors have a standard deviation below 0.15 around 2 (over 15 other sets of seeds they
// stayed in [1.81, 2.22]).
TEST(PerformerStatistics, the_error_falls_as_one_over_sqrt_m) {
  const Tensor3 pairs = pairs_tensor(kPairs, kPairCount);
  const std::size_t draws = 2000;
  std::vector<std::vector<double>> rms(kPairCount);
  for (const std::size_t m : {16, 64, 256}) {
    std::vector<double> squared(kPairCount, 0.0);
    for (std::size_t s = 0; s < draws; ++s) {
      const auto e = estimates(pairs, m, RandomFeatureKind::iid, RowNorms::chi, 200000 + 10000 * m + s);
      for (std::size_t p = 0; p < kPairCount; ++p) {
        const double error = e[p] - std::exp(inner(kPairs[p].x, kPairs[p].y));
        squared[p] += error * error;
      }
    }
    for (std::size_t p = 0; p < kPairCount; ++p) {
      rms[p].push_back(std::sqrt(squared[p] / double(draws)));
      const double x_dot_y = inner(kPairs[p].x, kPairs[p].y);
      const double lemma =
          std::sqrt(std::exp(2.0 * x_dot_y) * (std::exp(squared_norm_of_sum(kPairs[p])) - 1.0) / double(m));
      EXPECT_NEAR(rms[p].back(), lemma, 0.2 * lemma)
          << "pair " << p << ", m = " << m << ": RMS error against Lemma 2's";
    }
  }
  for (std::size_t p = 0; p < kPairCount; ++p)
    for (std::size_t i = 1; i < rms[p].size(); ++i) {
      const double ratio = rms[p][i - 1] / rms[p][i];
      EXPECT_TRUE(ratio >= 1.6 && ratio <= 2.5)
          << "pair " << p << ": RMS error " << rms[p][i - 1] << " then " << rms[p][i]
          << " for 4 times the features, ratio " << ratio << " (expected 2, the square root of 4)";
    }
}

// Statistical. Orthogonal rows with chi(d) lengths are unbiased too, and their mean squared error is
// smaller than iid rows' (Performer, Theorem 2; Yu et al. 2016): rows that cannot point the same way
// cover the directions more evenly. For the same seed the orthogonal rows are the iid rows
// orthogonalised, so the two errors of one seed are correlated, and the paired difference
// D_s = err_iid(s)^2 - err_orf(s)^2 measures the gain with a small standard error. The test is
// one-sided: the mean of D over 40000 seeds (m = 16, d = 4) must exceed 3 of its standard errors.
// On this pair (||x + y||^2 = 0.47) the measured gain is 7% of iid's MSE (0.0179 against 0.0167)
// and the statistic 8.2 (5 to 8 with 20000 seeds on nearby pairs, over six sets of seeds each, so
// about 7 to 11 with 40000): a correct implementation falls below 3 with a probability far under
// 1e-4. Features that are not orthogonalised give D = 0 and fail.
TEST(PerformerStatistics, orthogonal_features_have_a_lower_mean_squared_error) {
  const Pair pair{{0.6f, -0.3f, 0.4f, 0.1f}, {-0.4f, 0.6f, 0.1f, 0.2f}};
  const Tensor3 pairs = pairs_tensor(&pair, 1);
  const double exact = std::exp(inner(pair.x, pair.y));
  const std::size_t draws = 40000, m = 16;
  MeanAndError difference;
  double iid_squared = 0.0, orf_squared = 0.0;
  for (std::size_t s = 0; s < draws; ++s) {
    const double iid_error = estimates(pairs, m, RandomFeatureKind::iid, RowNorms::chi, 300000 + s)[0] - exact;
    const double orf_error = estimates(pairs, m, RandomFeatureKind::orthogonal, RowNorms::chi, 300000 + s)[0] - exact;
    iid_squared += iid_error * iid_error;
    orf_squared += orf_error * orf_error;
    difference.add(iid_error * iid_error - orf_error * orf_error);
  }
  EXPECT_GT(difference.mean(), 3.0 * difference.standard_error())
      << "MSE iid " << iid_squared / draws << ", orthogonal " << orf_squared / draws << ": the gain "
      << difference.mean() << " must exceed 3 standard errors (" << difference.standard_error() << ")";
}

// E[exp(a u_1)] for u uniform on the unit sphere of R^d:
//   sum_k (a^2/2)^k / (k! d (d + 2) ... (d + 2k - 2)),
// from E[u_1^{2k}] = (2k - 1)!! / (d (d + 2) ... (d + 2k - 2)). For omega = sqrt(d) u and z = x + y,
// E[exp(omega^T z)] is this with a = sqrt(d) ||z||. (With a chi(d) length instead, whose moments
// E[||omega||^{2k}] = d (d + 2) ... (d + 2k - 2) cancel the products, the sum is exp(||z||^2 / 2).)
double sphere_moment_generating(double a, std::size_t d) {
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 60; ++k) {
    term *= a * a / 2.0 / (double(k) * (double(d) + 2.0 * (k - 1)));
    sum += term;
  }
  return sum;
}

// Statistical. Rows of length sqrt(d) (RowNorms::sqrt_d) are no longer Gaussian, and the estimate is
// biased low: its mean is exp(-(||x||^2 + ||y||^2)/2) E[exp(sqrt(d) ||x + y|| u_1)] with u uniform on
// the sphere, 0.910 exp(x^T y) for pair 0 at d = 4, for iid and orthogonal directions alike. Over
// 2000 draws the mean must be within 4 standard errors of that value (false failure 6.3e-5 per
// check, as above) and below exp(x^T y) by more than 4 standard errors (the bias measures 12 to 15
// of them).
TEST(PerformerStatistics, fixed_lengths_sqrt_d_bias_the_estimate_low) {
  const Pair& pair = kPairs[0];
  const Tensor3 pairs = pairs_tensor(&pair, 1);
  const double exact = std::exp(inner(pair.x, pair.y));
  const double biased = std::exp(-(inner(pair.x, pair.x) + inner(pair.y, pair.y)) / 2.0) *
                        sphere_moment_generating(std::sqrt(double(kWidth) * squared_norm_of_sum(pair)), kWidth);
  const std::size_t draws = 2000, m = 16;
  for (const auto kind : {RandomFeatureKind::iid, RandomFeatureKind::orthogonal}) {
    MeanAndError stats;
    for (std::size_t s = 0; s < draws; ++s) stats.add(estimates(pairs, m, kind, RowNorms::sqrt_d, 400000 + s)[0]);
    EXPECT_LE(std::fabs(stats.mean() - biased), 4.0 * stats.standard_error())
        << to_string(kind) << ": mean " << stats.mean() << ", expected " << biased << " (exp(x^T y) = " << exact << ")";
    EXPECT_GT(exact - stats.mean(), 4.0 * stats.standard_error()) << to_string(kind) << ": the bias must show";
  }
}

// ---------------------------------------------------------------- attention

// Softmax attention with scale 1/sqrt(d) in double, and for each output element the standard
// deviation that m random features give it to first order: with a relative error eps_ij of the kernel
// estimate of pair (i, j), o_i moves by sum_j w_ij eps_ij (v_j - o_i); eps_ij has standard deviation
// sigma_ij = sqrt((exp(||q^_i + k^_j||^2) - 1) / m) (Lemma 2 over exp(2 q^_i . k^_j)), and however
// the eps_ij of one query are correlated the sum's standard deviation is at most
// sum_j w_ij |v_je - o_ie| sigma_ij (orthogonal rows have less variance, so this bounds them too).
struct Softmax {
  DTensor3 o, deviation;
};
Softmax softmax_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, bool causal, std::size_t m) {
  const std::size_t h = q.shape()[0], n_q = q.shape()[1], n_k = k.shape()[1], d = q.shape()[2], d_v = v.shape()[2];
  Softmax out{xt::zeros<double>({h, n_q, d_v}), xt::zeros<double>({h, n_q, d_v})};
  const double input_scale = std::pow(double(d), -0.25);
  for (std::size_t head = 0; head < h; ++head)
    for (std::size_t i = 0; i < n_q; ++i) {
      const std::size_t keys = causal ? i + 1 : n_k;
      std::vector<double> w(keys), sigma(keys);
      double total = 0.0;
      for (std::size_t j = 0; j < keys; ++j) {
        double score = 0.0, sum_squared = 0.0;
        for (std::size_t c = 0; c < d; ++c) {
          score += double(q(head, i, c)) * double(k(head, j, c));
          const double z = input_scale * (double(q(head, i, c)) + double(k(head, j, c)));
          sum_squared += z * z;
        }
        w[j] = std::exp(score / std::sqrt(double(d)));
        total += w[j];
        sigma[j] = std::sqrt(std::expm1(sum_squared) / double(m));
      }
      for (std::size_t e = 0; e < d_v; ++e) {
        double o = 0.0;
        for (std::size_t j = 0; j < keys; ++j) o += w[j] / total * v(head, j, e);
        double deviation = 0.0;
        for (std::size_t j = 0; j < keys; ++j) deviation += w[j] / total * std::fabs(v(head, j, e) - o) * sigma[j];
        out.o(head, i, e) = o;
        out.deviation(head, i, e) = deviation;
      }
    }
  return out;
}

// Queries and keys of standard deviation 0.5 at d = 4: ||q^ + k^||^2 is then about 1 (its variance
// factor exp(||q^ + k^||^2) stays small), and the scores q . k / 2 still spread the weights over a
// factor of about 3. Larger inputs make the kernel estimate heavy-tailed: with standard normal q
// and k the error at m = 16384 is ten times larger.
struct Inputs {
  Tensor3 q, k, v;
};
Inputs attention_inputs(std::uint64_t seed) {
  Rng rng(seed);
  Inputs in{rng.normal_tensor(2, 6, 4, 0.0, 0.5), rng.normal_tensor(2, 6, 4, 0.0, 0.5), rng.normal_tensor(2, 6, 3)};
  return in;
}

// Statistical. With m = 16384 features every output element is within 5 of its first-order standard
// deviations (above) of softmax attention, for both kinds, causal and not; plus 1e-6 for float.
// Measured, the largest error was 0.27 to 1.34 deviations here (and up to 2.0 over 8 other input
// seeds); a normal error exceeds 5 with probability 6e-7 per element (about 1e-4 over the 144 here),
// and the bound on the deviation is conservative. Without the d^{-1/4} scaling the Performer
// estimates exp(q . k) instead of exp(q . k / 2), and about a fifth of the elements fall outside.
TEST(PerformerStatistics, attention_with_many_features_approximates_softmax_attention) {
  const std::size_t m = 16384;
  const Inputs in = attention_inputs(501);
  for (const auto kind : {RandomFeatureKind::iid, RandomFeatureKind::orthogonal})
    for (const bool causal : {false, true}) {
      const Softmax expected = softmax_attention(in.q, in.k, in.v, causal, m);
      const Tensor3 o =
          performer_attention(in.q, in.k, in.v, draw_performer_features(m, 4, kind, RowNorms::chi, 502), causal);
      std::size_t outside = 0;
      double worst = 0.0;
      for (std::size_t i = 0; i < o.size(); ++i) {
        const double error = std::fabs(o.data()[i] - expected.o.data()[i]);
        worst = std::max(worst, error / expected.deviation.data()[i]);
        outside += error > 5.0 * expected.deviation.data()[i] + 1e-6;
      }
      EXPECT_EQ(outside, 0u) << to_string(kind) << (causal ? ", causal" : ", non-causal") << ": " << outside
                             << " elements beyond 5 deviations (worst " << worst
                             << "); the usual mistake: q and k not scaled by d^{-1/4}";
    }
}

// Statistical. The error against softmax attention shrinks as m^{-1/2}: multiplying m by 16 divides it
// by 4. The median |error| over 32 input seeds x 36 elements (orthogonal features, a new seed per m)
// is compared for m = 64, 1024, 16384; each ratio must be at least 2.5. The median resists the heavy
// tail of the estimate that makes an RMS over few draws jumpy; over 30 other sets of seeds the ratios
// stayed in [2.99, 4.72] (here 3.4 and 4.2: 0.0225, 0.0065, 0.0016). A bias (a wrong scaling) stops
// the fall: without d^{-1/4} the second ratio is about 1.1.
TEST(PerformerStatistics, the_attention_error_shrinks_as_m_grows) {
  std::vector<double> medians;
  for (const std::size_t m : {64, 1024, 16384}) {
    std::vector<double> errors;
    for (std::uint64_t seed = 0; seed < 32; ++seed) {
      const Inputs in = attention_inputs(600 + seed);
      const Softmax expected = softmax_attention(in.q, in.k, in.v, false, m);
      const Tensor3 o = performer_attention(
          in.q, in.k, in.v,
          draw_performer_features(m, 4, RandomFeatureKind::orthogonal, RowNorms::chi, 1000 * m + seed), false);
      for (std::size_t i = 0; i < o.size(); ++i) errors.push_back(std::fabs(o.data()[i] - expected.o.data()[i]));
    }
    std::nth_element(errors.begin(), errors.begin() + errors.size() / 2, errors.end());
    medians.push_back(errors[errors.size() / 2]);
  }
  for (std::size_t i = 1; i < medians.size(); ++i)
    EXPECT_GE(medians[i - 1] / medians[i], 2.5) << "median |error| " << medians[i - 1] << " then " << medians[i]
                                                << " for 16 times the features (expected a ratio near 4)";
}

// Deterministic: Performer attention is linear attention over the features phi+(d^{-1/4} q) and
// phi+(d^{-1/4} k) with FeatureMap::identity, normalised (the chapter's linear_attention and
// causal_linear_attention_parallel, given the features as their q and k). The features pass through
// float there (one rounding each, relative 2^-24 = 6e-8) and the outputs are ratios of sums of
// positive terms, which relative errors delta of the terms move by at most 2 delta max|v|: 1e-6 max|v|.
TEST(Performer, attention_is_linear_attention_over_the_positive_features) {
  const Inputs in = attention_inputs(701);
  const PerformerFeatures features = draw_performer_features(37, 4, RandomFeatureKind::orthogonal, RowNorms::chi, 702);
  const float input_scale = static_cast<float>(std::pow(4.0, -0.25));
  const Tensor3 phi_q = performer_feature_map(Tensor3(in.q * input_scale), features);
  const Tensor3 phi_k = performer_feature_map(Tensor3(in.k * input_scale), features);
  LinearAttentionConfig cfg;
  cfg.feature_map = FeatureMap::identity;
  cfg.normalize = true;
  const double atol = 1e-6 * double(xt::amax(xt::abs(in.v))());
  const Tensor3 non_causal = performer_attention(in.q, in.k, in.v, features, false);
  const Tensor3 expected_non_causal = linear_attention(phi_q, phi_k, in.v, cfg);
  const Tensor3 causal = performer_attention(in.q, in.k, in.v, features, true);
  const Tensor3 expected_causal = causal_linear_attention_parallel(phi_q, phi_k, in.v, cfg);
  for (std::size_t i = 0; i < non_causal.size(); ++i) {
    EXPECT_NEAR(non_causal.data()[i], expected_non_causal.data()[i], atol) << "non-causal, flat index " << i;
    EXPECT_NEAR(causal.data()[i], expected_causal.data()[i], atol) << "causal, flat index " << i;
  }
}

// Deterministic: the last query sees every key either way, so the causal and non-causal outputs of
// the last row are equal (to rounding: the sums are the same, added in the same order); a causal row i
// is the non-causal attention over keys 0..i.
TEST(Performer, causal_rows_are_non_causal_attention_over_the_keys_so_far) {
  const Inputs in = attention_inputs(801);
  const PerformerFeatures features = draw_performer_features(64, 4, RandomFeatureKind::iid, RowNorms::chi, 802);
  const Tensor3 causal = performer_attention(in.q, in.k, in.v, features, true);
  const Tensor3 non_causal = performer_attention(in.q, in.k, in.v, features, false);
  for (std::size_t head = 0; head < 2; ++head)
    for (std::size_t e = 0; e < 3; ++e)
      EXPECT_EQ(causal(head, 5, e), non_causal(head, 5, e)) << "head " << head << ", e " << e;
  const auto first = [](const Tensor3& x, std::size_t rows) -> Tensor3 {
    return xt::view(x, xt::all(), xt::range(0, rows), xt::all());
  };
  for (std::size_t i = 0; i < 5; ++i) {
    const Tensor3 over_prefix =
        performer_attention(first(in.q, i + 1), first(in.k, i + 1), first(in.v, i + 1), features, false);
    for (std::size_t head = 0; head < 2; ++head)
      for (std::size_t e = 0; e < 3; ++e)
        EXPECT_NEAR(causal(head, i, e), over_prefix(head, i, e), 1e-6) << "causal row " << i << " of head " << head;
  }
}

// ---------------------------------------------------------------- bad input

TEST(Performer, bad_input_names_the_parameter) {
  EXPECT_TRUE(throws_error_naming([] { draw_performer_features(0, 4, RandomFeatureKind::iid, RowNorms::chi, 1); },
                                  {"draw_performer_features", "num_features"}));
  EXPECT_TRUE(
      throws_error_naming([] { draw_performer_features(8, 0, RandomFeatureKind::orthogonal, RowNorms::chi, 1); },
                          {"draw_performer_features", "head_dim"}));
  EXPECT_TRUE(
      throws_error_naming([] { draw_performer_features(8, 4, static_cast<RandomFeatureKind>(7), RowNorms::chi, 1); },
                          {"draw_performer_features", "kind"}));
  EXPECT_TRUE(
      throws_error_naming([] { draw_performer_features(8, 4, RandomFeatureKind::iid, static_cast<RowNorms>(7), 1); },
                          {"draw_performer_features", "norms"}));

  const PerformerFeatures features = draw_performer_features(8, 2, RandomFeatureKind::iid, RowNorms::chi, 3);
  const Tensor3 x = head_of({{0.1f, 0.2f}, {0.3f, -0.4f}});
  PerformerFeatures empty;
  empty.w = DTensor2::from_shape({0, 2});
  EXPECT_TRUE(
      throws_error_naming([&] { performer_feature_map(x, empty); }, {"performer_feature_map", "features.w", "empty"}));
  EXPECT_TRUE(throws_error_naming([&] { performer_feature_map(x, PerformerFeatures{}); },
                                  {"performer_feature_map", "features.w", "empty"}));
  EXPECT_TRUE(throws_error_naming(
      [&] {
        performer_feature_map(head_of({{0.1f, 0.2f, 0.3f}}), features);
      },
      {"performer_feature_map", "x", "d 3, expected 2"}));
  Tensor3 nan_x = x;
  nan_x(0, 1, 0) = std::nanf("");
  EXPECT_TRUE(throws_error_naming([&] { performer_feature_map(nan_x, features); },
                                  {"performer_feature_map", "x", "non-finite"}));
  // omega = (20, 0) and x = (20, 0): omega^T x - |x|^2/2 = 200, beyond float's 88.7 + ln sqrt(1)
  EXPECT_TRUE(throws_error_naming(
      [&] {
        performer_feature_map(head_of({{20.0f, 0.0f}}), hand_built({{20.0, 0.0}}));
      },
      {"performer_feature_map", "x", "float", "scale x down"}));

  const Tensor3 v = head_of({{1.0f}, {2.0f}});
  EXPECT_TRUE(throws_error_naming(
      [&] {
        performer_attention(head_of({{0.1f, 0.2f, 0.3f}}), x, v, features, false);
      },
      {"performer_attention", "q", "d 3, expected 2"}));
  EXPECT_TRUE(throws_error_naming(
      [&] {
        performer_attention(x, head_of({{0.1f, 0.2f, 0.3f}, {0.f, 0.f, 0.f}}), v, features, false);
      },
      {"performer_attention", "k", "d 3, expected 2"}));
  EXPECT_TRUE(throws_error_naming([&] { performer_attention(x, nan_x, v, features, false); },
                                  {"performer_attention", "k", "non-finite"}));
  EXPECT_TRUE(throws_error_naming([&] { performer_attention(x, x, head_of({{1.0f}}), features, false); },
                                  {"performer_attention", "v", "seq"}));
  EXPECT_TRUE(throws_error_naming(
      [&] {
        performer_attention(head_of({{0.1f, 0.2f}}), x, v, features, true);
      },
      {"performer_attention", "k", "seq"}));
  PerformerFeatures nan_w = features;
  nan_w.w(3, 1) = std::nan("");
  EXPECT_TRUE(throws_error_naming([&] { performer_attention(x, x, v, nan_w, false); },
                                  {"performer_attention", "features.w", "non-finite"}));
  EXPECT_TRUE(throws_error_naming([&] { performer_attention(x, x, v, empty, false); },
                                  {"performer_attention", "features.w", "empty"}));
  // d = 2, d^{-1/4} = 0.8409: k = (47.57, 0) scales to k^ = (40, 0), and with omega = (40, 0) the
  // exponent is 1600 - 800 = 800, beyond double's 709.8
  const PerformerFeatures long_row = hand_built({{40.0, 0.0}});
  const float forty_scaled = static_cast<float>(40.0 / std::pow(2.0, -0.25));
  EXPECT_TRUE(throws_error_naming(
      [&] {
        performer_attention(head_of({{0.1f, 0.2f}}), head_of({{forty_scaled, 0.0f}}), head_of({{1.0f}}), long_row,
                            false);
      },
      {"performer_attention", "k", "double", "scale k down"}));
  // q^ = (0, 40) with omega = (1, 0): phi+(q^) = exp(-800) underflows to 0, and so does the normaliser
  EXPECT_TRUE(throws_error_naming(
      [&] {
        performer_attention(head_of({{0.0f, forty_scaled}}), head_of({{0.1f, 0.2f}}), head_of({{1.0f}}),
                            hand_built({{1.0, 0.0}}), false);
      },
      {"performer_attention", "normaliser", "underflows", "scale q and k down"}));
}

}  // namespace
}  // namespace tvlab::ref

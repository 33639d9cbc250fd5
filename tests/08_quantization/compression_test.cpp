// Chapter 08, compression beyond quantization: the truncated SVD is the factorisation whose error
// is the discarded singular values (Eckart-Young), measured on the product; a low-rank-plus-noise
// matrix compresses where a random one does not; ALBERT's cross-layer sharing counted parameter by
// parameter, against the published sizes of BERT-base and ALBERT-base.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/analysis/compression.hpp"
#include "tvlab/analysis/low_rank.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

DTensor2 normal_dmatrix(unsigned long long seed, std::size_t rows, std::size_t cols) {
  return Rng(seed).normal_dmatrix(rows, cols);
}

// A matrix of rank 8 (a product of [m, 8] and [8, n] Gaussians) plus noise of 1/100 of its size.
DTensor2 low_rank_plus_noise(unsigned long long seed, std::size_t m, std::size_t n) {
  const DTensor2 a = normal_dmatrix(seed, m, 8), b = normal_dmatrix(seed + 1, 8, n), noise = normal_dmatrix(seed + 2, m, n);
  DTensor2 w = DTensor2::from_shape({m, n});
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (std::size_t k = 0; k < 8; ++k) s += a(i, k) * b(k, j);
      w(i, j) = s + 0.01 * std::sqrt(8.0) * noise(i, j);
    }
  return w;
}

// ||W - L R||_F^2 = sum_{i > r} sigma_i^2 (Eckart-Young), tall and wide, every rank.
TEST(Ch08Compression, the_error_is_the_discarded_singular_values) {
  for (const auto& [m, n] : {std::pair<std::size_t, std::size_t>{30, 12}, {12, 30}}) {
    const DTensor2 w = normal_dmatrix(830 + m, m, n);
    std::vector<std::size_t> ranks;
    for (std::size_t r = 1; r <= std::min(m, n); ++r) ranks.push_back(r);
    const auto table = low_rank_table(w, ranks);
    const std::vector<double> sigma = low_rank_factors(w, 1).singular_values;
    double total = 0.0;
    for (double s : sigma) total += s * s;
    for (const LowRankRow& row : table) {
      double rest = 0.0;
      for (std::size_t i = row.rank; i < sigma.size(); ++i) rest += sigma[i] * sigma[i];
      EXPECT_NEAR(row.relative_error, std::sqrt(rest / total), 1e-10) << m << " x " << n << ", rank " << row.rank;
      EXPECT_DOUBLE_EQ(row.compression, double(m * n) / double(row.rank * (m + n)));
    }
    EXPECT_LT(table.back().relative_error, 1e-12) << "full rank gives W back";
  }
}

// The factors: R's rows orthonormal, L's columns orthogonal with norms sigma_1..sigma_r.
TEST(Ch08Compression, the_factors_are_the_singular_vectors) {
  const DTensor2 w = normal_dmatrix(831, 20, 9);
  const LowRankFactors f = low_rank_factors(w, 5);
  for (std::size_t a = 0; a < 5; ++a)
    for (std::size_t b = 0; b < 5; ++b) {
      double rr = 0.0, ll = 0.0;
      for (std::size_t j = 0; j < 9; ++j) rr += f.right(a, j) * f.right(b, j);
      for (std::size_t i = 0; i < 20; ++i) ll += f.left(i, a) * f.left(i, b);
      EXPECT_NEAR(rr, a == b ? 1.0 : 0.0, 1e-12);
      EXPECT_NEAR(ll, a == b ? f.singular_values[a] * f.singular_values[a] : 0.0, 1e-10);
    }
}

// A diagonal matrix's singular values are its |entries|, sorted; a rank-1 product u v^T has one,
// |u| |v|.
TEST(Ch08Compression, singular_values_by_hand) {
  DTensor2 d = xt::zeros<double>({4, 3});
  d(0, 0) = 2.0, d(1, 1) = -5.0, d(2, 2) = 0.5;
  const Svd s = svd(d);
  EXPECT_NEAR(s.sigma[0], 5.0, 1e-14);
  EXPECT_NEAR(s.sigma[1], 2.0, 1e-14);
  EXPECT_NEAR(s.sigma[2], 0.5, 1e-14);
  DTensor2 r1 = DTensor2::from_shape({5, 4});
  const double u[5] = {1, 2, 0, -1, 3}, v[4] = {0.5, -1, 2, 1};  // |u|^2 = 15, |v|^2 = 6.25
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 4; ++j) r1(i, j) = u[i] * v[j];
  const std::vector<double> sigma = singular_values(r1);
  EXPECT_NEAR(sigma[0], std::sqrt(15.0 * 6.25), 1e-12);
  for (std::size_t k = 1; k < 4; ++k) EXPECT_LT(sigma[k], 1e-12);
}

// Rank 8 plus 1% noise keeps 99.9% of its energy at rank 8; a Gaussian matrix of the same size
// keeps about half at rank 32 of 64 (its singular values spread out: Marchenko-Pastur).
TEST(Ch08Compression, structure_compresses_noise_does_not) {
  const auto structured = low_rank_table(low_rank_plus_noise(832, 64, 64), {4, 8, 32});
  const auto random = low_rank_table(normal_dmatrix(833, 64, 64), {4, 8, 32});
  EXPECT_GT(structured[0].relative_error, 0.1) << "rank 4 cannot hold a rank-8 matrix";
  EXPECT_LT(structured[1].relative_error, 0.02) << "rank 8 keeps all but the noise";
  EXPECT_GT(random[1].relative_error, 0.7);
  EXPECT_GT(random[2].relative_error, 0.3);
}

TEST(Ch08Compression, bad_input_is_named) {
  const DTensor2 w = normal_dmatrix(834, 6, 4);
  EXPECT_TRUE(throws_error_naming([&] { low_rank_factors(w, 0); }, {"low_rank_factors", "rank (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { low_rank_factors(w, 5); }, {"low_rank_factors", "rank (5)", "min(m, n) = 4"}));
  DTensor2 bad = w;
  bad(2, 2) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { low_rank_factors(bad, 2); }, {"low_rank_factors", "w", "not finite"}));
  EncoderShape s;
  s.num_hidden_layers = 0;
  EXPECT_TRUE(throws_error_naming([&] { encoder_parameters(s, false); }, {"encoder_parameters", "positive"}));
}

// BERT-base (30522 tokens, H = 768, 12 layers, F = 3072) and ALBERT-base (30000 tokens, E = 128,
// the layers shared), counted term by term: 109,482,240 and 11,683,584, the sizes Hugging Face's
// BertModel and AlbertModel report for bert-base-uncased and albert-base-v2.
TEST(Ch08Compression, albert_counts_its_parameters_as_published) {
  const EncoderShape bert;
  EXPECT_EQ(encoder_parameters(bert, false), 109482240);
  EncoderShape albert;
  albert.vocab_size = 30000;
  albert.embedding_size = 128;
  EXPECT_EQ(encoder_parameters(albert, true), 11683584);
  // sharing alone, BERT-base's layers counted once: 71% fewer (000 L275: "about 70%")
  const double shared = static_cast<double>(encoder_parameters(bert, true));
  EXPECT_NEAR(1.0 - shared / 109482240.0, 0.712, 0.001);
}

}  // namespace
}  // namespace tvlab::analysis

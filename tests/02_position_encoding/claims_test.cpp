// Chapter 02: the first document's claims about extrapolation, measured — attention entropy with and
// without YaRN's attention factor, sinusoidal encodings beyond the training length, ALiBi in the
// extrapolation experiment — and T5's bucketed relative position bias.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "common/attention_oracle.hpp"
#include "common/testing.hpp"
#include "tvlab/analysis/attention_entropy.hpp"
#include "tvlab/analysis/rope_extrapolation.hpp"
#include "tvlab/analysis/sinusoidal_extrapolation.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/analysis/relative_position_bias.hpp"
#include "tvlab/ref/sinusoidal.hpp"

namespace tvlab::ch02 {
namespace {

using tvlab::testing::throws_error_naming;

// ------------------------------------------------------------------------------ attention entropy

TEST(Ch02Entropy, softmax_entropy_of_known_distributions) {
  // Equal logits: uniform weights, H = ln n.
  EXPECT_NEAR(analysis::softmax_entropy(std::vector<double>(1000, 3.5)), std::log(1000.0), 1e-12);
  // Logits 0 and ln 3: p = (1/4, 3/4), H = -(1/4) ln(1/4) - (3/4) ln(3/4).
  EXPECT_NEAR(analysis::softmax_entropy({0.0, std::log(3.0)}), -0.25 * std::log(0.25) - 0.75 * std::log(0.75), 1e-15);
  // One logit far above the rest: all weight on it, H ~ 999 e^-1000 (1000 + 1) ~ 0.
  std::vector<double> sharp(1000, -1000.0);
  sharp[7] = 0.0;
  EXPECT_NEAR(analysis::softmax_entropy(sharp), 0.0, 1e-12);
  EXPECT_TRUE(throws_error_naming([] { analysis::softmax_entropy({}); }, {"softmax_entropy", "x"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::softmax_entropy({0.0, std::nan("")}); }, {"softmax_entropy", "x"}));
}

TEST(Ch02Entropy, longer_contexts_flatten_attention_and_yarns_factor_sharpens_it) {
  // Given q, the score q . R k_j / sqrt(d) of an independent N(0, 1) key is N(0, sigma^2) with
  // sigma^2 = |q|^2 / d (a rotation keeps |k|), E sigma^2 = 1. For n iid logits of variance
  // sigma^2, H -> ln n + sigma^2/2 - sigma^2 = ln n - sigma^2/2 (ln sum e^x ~ ln n + ln E e^X,
  // sum p x ~ E[X e^X] / E[e^X]). YaRN's factor a_f multiplies cos and sin of q and k: logits
  // times a_f^2, sigma^2 times a_f^4. Tolerance 0.07: over 16 samples the mean of sigma^2 / 2 has
  // standard deviation sqrt(2/128) / 4 / 2 = 0.016 and Z / n a relative one of
  // sqrt(e^{sigma^2} - 1) / sqrt(n) <= 0.01 at n = 4096 (0.017 with the factor): about 4 sigma.
  const double s = 4;
  const auto rows = analysis::attention_entropy(128, 1e4, 4096, s, {4096, 16384}, 16, 5);
  ASSERT_EQ(rows.size(), 2U);
  const double a_f = 0.1 * std::log(s) + 1;
  for (const auto& r : rows) {
    const double ln_n = std::log(static_cast<double>(r.length));
    EXPECT_NEAR(r.uniform, ln_n, 1e-15);
    EXPECT_NEAR(r.attention_factor, a_f, 1e-12);
    EXPECT_NEAR(r.original, ln_n - 0.5, 0.07) << "n = " << r.length;
    EXPECT_NEAR(r.yarn, ln_n - 0.5, 0.07) << "n = " << r.length;
    EXPECT_NEAR(r.yarn_with_factor, ln_n - std::pow(a_f, 4) / 2, 0.07) << "n = " << r.length;
    // The factor always lowers the entropy (sharper), never raises it.
    EXPECT_LT(r.yarn_with_factor, r.yarn - 0.2);
  }
  // Four times the context: about ln 4 = 1.386 more entropy (flatter), the document's premise reversed.
  EXPECT_NEAR(rows[1].original - rows[0].original, std::log(4.0), 0.07);
  EXPECT_TRUE(throws_error_naming([] { analysis::attention_entropy(127, 1e4, 4096, 4, {64}, 1, 1); }, {"head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::attention_entropy(64, 1e4, 0, 4, {64}, 1, 1); }, {"original_length"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::attention_entropy(64, 1e4, 4096, 0.5, {64}, 1, 1); }, {"factor"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::attention_entropy(64, 1e4, 4096, 4, {}, 1, 1); }, {"lengths"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::attention_entropy(64, 1e4, 4096, 4, {0}, 1, 1); }, {"lengths"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::attention_entropy(64, 1e4, 4096, 4, {64}, 0, 1); }, {"samples"}));
}

// -------------------------------------------------------------------- sinusoidal beyond the length

// Cosine similarity of two rows of ref::sinusoidal_position_encoding, in double.
double encoding_cosine(const Tensor2& a, std::size_t p, const Tensor2& b, std::size_t q) {
  double dot = 0, na = 0, nb = 0;
  for (std::size_t c = 0; c < a.shape()[1]; ++c) {
    dot += static_cast<double>(a(p, c)) * b(q, c);
    na += static_cast<double>(a(p, c)) * a(p, c);
    nb += static_cast<double>(b(q, c)) * b(q, c);
  }
  return dot / std::sqrt(na * nb);
}

TEST(Ch02Sinusoidal, similarity_depends_on_the_distance_only) {
  // Against the encodings themselves: float entries (error ~6e-8 each) give cosines within 1e-6.
  const Tensor2 pe = ref::sinusoidal_position_encoding(300, 64);
  for (long long delta : {0LL, 1LL, 7LL, 100LL, 250LL})
    for (long long p : {0LL, 13LL, 40LL})
      EXPECT_NEAR(analysis::sinusoidal_similarity(64, 1e4, delta),
                  encoding_cosine(pe, static_cast<std::size_t>(p), pe, static_cast<std::size_t>(p + delta)), 1e-6)
          << "distance " << delta << ", p " << p;
  EXPECT_NEAR(analysis::sinusoidal_similarity(512, 1e4, 0), 1.0, 1e-15);
  EXPECT_TRUE(throws_error_naming([] { analysis::sinusoidal_similarity(63, 1e4, 1); }, {"d_model"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::sinusoidal_similarity(64, 1.0, 1); }, {"base"}));
}

TEST(Ch02Sinusoidal, nearest_trained_encoding_matches_a_brute_force_search) {
  // d_model 32, L = 32: search every p in each range against every p' < L with the encodings.
  const int d = 32;
  const long long L = 32;
  const std::vector<long long> edges = {32, 64, 200, 700};
  const Tensor2 trained = ref::sinusoidal_position_encoding(L, d);
  const Tensor2 later = ref::sinusoidal_position_encoding(edges.back(), d);
  const auto rows = analysis::sinusoidal_nearest_trained(d, 1e4, L, edges);
  ASSERT_EQ(rows.size(), edges.size() - 1);
  for (std::size_t e = 0; e + 1 < edges.size(); ++e) {
    double best = -2;
    for (auto p = static_cast<std::size_t>(edges[e]); p < static_cast<std::size_t>(edges[e + 1]); ++p)
      for (std::size_t q = 0; q < static_cast<std::size_t>(L); ++q) best = std::max(best, encoding_cosine(later, p, trained, q));
    const auto& r = rows[e];
    EXPECT_NEAR(r.similarity, best, 1e-6) << "range " << edges[e] << " .. " << edges[e + 1];
    EXPECT_GE(r.position, edges[e]);
    EXPECT_LT(r.position, edges[e + 1]);
    EXPECT_GE(r.nearest, 0);
    EXPECT_LT(r.nearest, L);
    EXPECT_NEAR(encoding_cosine(later, static_cast<std::size_t>(r.position), trained, static_cast<std::size_t>(r.nearest)),
                r.similarity, 1e-6);
    // |a - b|^2 = |a|^2 + |b|^2 - 2 a.b = d (1 - cos) for |a|^2 = |b|^2 = d/2.
    EXPECT_NEAR(r.distance, std::sqrt(d * (1 - r.similarity)), 1e-12);
  }
  // Just past L the closest is the last trained position, as close as two trained neighbours.
  EXPECT_EQ(rows[0].position, L);
  EXPECT_EQ(rows[0].nearest, L - 1);
  EXPECT_TRUE(throws_error_naming([] { analysis::sinusoidal_nearest_trained(32, 1e4, 32, {16, 64}); }, {"edges"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::sinusoidal_nearest_trained(32, 1e4, 32, {64, 64}); }, {"edges"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::sinusoidal_nearest_trained(32, 1e4, 32, {64}); }, {"edges"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::sinusoidal_nearest_trained(32, 1e4, 0, {64, 70}); }, {"original_length"}));
}

TEST(Ch02Sinusoidal, pairs_that_never_turn_in_training) {
  // omega_i = 10000^(-2i/d) with (L - 1) omega_i < 2 pi  <=>  2i/d > ln((L - 1) / 2 pi) / ln 10000.
  // d = 512, L = 512: ln(511 / 2 pi) / ln 1e4 = 0.47746..., so i > 122.2: pairs 123 .. 255, 133 of them.
  EXPECT_EQ(analysis::sinusoidal_unseen_pairs(512, 1e4, 512), 133);
  EXPECT_EQ(analysis::sinusoidal_unseen_pairs(512, 1e4, 1), 256);  // one position: no pair has turned
  EXPECT_TRUE(throws_error_naming([] { analysis::sinusoidal_unseen_pairs(512, 1e4, 0); }, {"original_length"}));
}

// ---------------------------------------------------------------------------- ALiBi extrapolation

TEST(Ch02Extrapolation, alibi_never_leaves_its_formula_and_barely_looks_beyond_l) {
  const int d = 128, heads = 8, samples = 16;
  const long long L = 4096;
  const double s = 4;
  const auto alibi = analysis::alibi_extrapolation(d, L, s, heads, samples, 7);
  // Nothing rotates and nothing changes with the length.
  EXPECT_EQ(alibi.unseen_angle_pairs, 0);
  EXPECT_EQ(alibi.short_range_change, 0.0);
  EXPECT_TRUE(std::isnan(alibi.neighbour_resolution));
  // q . k / sqrt(d) - m Delta falls with Delta: every score beyond L is below the trained minimum.
  EXPECT_EQ(alibi.outside_range, 1.0);
  EXPECT_EQ(alibi.self_below_minimum, 1.0);
  // The same key at every distance: q . k cancels, weights e^{-m Delta}, and the weight beyond L is
  // (e^{-mL} - e^{-msL}) / (1 - e^{-msL}); sample n in head n mod 8, m_h = 2^{-(h + 1)} (8 heads).
  double expected = 0;
  for (int n = 0; n < samples; ++n) {
    const double m = std::pow(2.0, -((n % heads) + 1)), sl = s * static_cast<double>(L);
    expected += (std::exp(-m * static_cast<double>(L)) - std::exp(-m * sl)) / (1 - std::exp(-m * sl)) / samples;
  }
  EXPECT_NEAR(alibi.weight_beyond_original, expected, 1e-3 * expected);
  EXPECT_LT(alibi.weight_beyond_original, 1e-6);
  // RoPE with the same key at every distance spreads its weight over all sL distances: more than
  // half of it lands beyond L (3/4 of the distances), for every method.
  for (const auto& r : analysis::rope_extrapolation(d, 1e4, L, s, samples, 7))
    EXPECT_GT(r.weight_beyond_original, 0.5) << r.method;
  EXPECT_TRUE(throws_error_naming([] { analysis::alibi_extrapolation(128, 4096, 4, 0, 4, 1); }, {"num_heads"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::alibi_extrapolation(128, 32, 4, 8, 4, 1); }, {"original_length"}));
}

// ---------------------------------------------------------------------------------- T5's buckets

TEST(Ch02T5Buckets, decoder_buckets_computed_by_hand) {
  // Unidirectional, num_buckets 32, max_distance 128: B = 32, E = 16, n = max(-r, 0).
  // n < 16: bucket n. n >= 16: 16 + floor(ln(n/16) / ln 8 * 16), at most 31.
  auto bucket = [](long long r) { return analysis::t5_relative_position_bucket(r, false, 32, 128); };
  EXPECT_EQ(bucket(0), 0);
  EXPECT_EQ(bucket(-1), 1);
  EXPECT_EQ(bucket(-15), 15);  // the last exact bucket
  EXPECT_EQ(bucket(-16), 16);  // ln 1 = 0
  EXPECT_EQ(bucket(-31), 21);  // ln(31/16) / ln 8 * 16 = 0.66140 / 2.07944 * 16 = 5.089
  EXPECT_EQ(bucket(-32), 21);  // ln 2 / ln 8 * 16 = 16/3 = 5.333
  EXPECT_EQ(bucket(-64), 26);  // ln 4 / ln 8 * 16 = 32/3 = 10.667
  EXPECT_EQ(bucket(-127), 31); // ln(127/16) / ln 8 * 16 = 2.07158 / 2.07944 * 16 = 15.94
  EXPECT_EQ(bucket(-128), 31); // 16 + 16 = 32, clipped to 31
  EXPECT_EQ(bucket(-100000), 31);
  // Later keys (r > 0) do not exist for a decoder: they share bucket 0 with the query.
  EXPECT_EQ(bucket(1), 0);
  EXPECT_EQ(bucket(500), 0);
}

TEST(Ch02T5Buckets, encoder_buckets_split_by_direction) {
  // Bidirectional, num_buckets 32, max_distance 128: two halves of B = 16 (E = 8), keys after
  // the query (r > 0) in 16 .. 31. n >= 8: 8 + floor(ln(n/8) / ln 16 * 8) = 8 + floor(2 log2(n/8)).
  auto bucket = [](long long r) { return analysis::t5_relative_position_bucket(r, true, 32, 128); };
  EXPECT_EQ(bucket(0), 0);
  EXPECT_EQ(bucket(-5), 5);
  EXPECT_EQ(bucket(5), 21);     // 16 + 5
  EXPECT_EQ(bucket(-7), 7);
  EXPECT_EQ(bucket(-8), 8);
  EXPECT_EQ(bucket(-11), 8);    // 2 log2(11/8) = 0.919
  EXPECT_EQ(bucket(-12), 9);    // 2 log2(1.5) = 1.170
  EXPECT_EQ(bucket(-15), 9);    // 2 log2(15/8) = 1.814
  EXPECT_EQ(bucket(-16), 10);   // 2 log2(2) = 2 exactly: an edge
  EXPECT_EQ(bucket(16), 26);    // 16 + 10
  EXPECT_EQ(bucket(-32), 12);   // 2 log2 4 = 4
  EXPECT_EQ(bucket(-64), 14);   // 2 log2 8 = 6
  EXPECT_EQ(bucket(-127), 15);  // 2 log2(15.875) = 7.977
  EXPECT_EQ(bucket(-128), 15);  // 8 + 8 = 16, clipped to 15
  EXPECT_EQ(bucket(128), 31);
  EXPECT_EQ(bucket(99999), 31);
  // Every edge n = 8 * 2^(t/2) that is a whole number starts its bucket: n - 1 is one bucket lower.
  for (long long n : {16LL, 32LL, 64LL}) EXPECT_EQ(bucket(-n) - bucket(-(n - 1)), 1) << "n = " << n;
  EXPECT_TRUE(throws_error_naming([] { analysis::t5_relative_position_bucket(0, true, 3, 128); }, {"num_buckets"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::t5_relative_position_bucket(0, false, 1, 128); }, {"num_buckets"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::t5_relative_position_bucket(0, true, 32, 8); }, {"max_distance"}));
}

TEST(Ch02T5Bias, bias_looks_up_the_table_by_bucket_with_the_queries_last) {
  // table(b, h) = 100 h + b: the bias names its bucket. 2 queries, 40 keys: query i sits at
  // position i' = i + 38, so key j has r = j - i - 38.
  const std::size_t buckets = 32, heads = 3;
  Tensor2 table = Tensor2::from_shape({buckets, heads});
  for (std::size_t b = 0; b < buckets; ++b)
    for (std::size_t h = 0; h < heads; ++h) table(b, h) = static_cast<float>(100 * h + b);
  const Tensor3 bias = analysis::t5_relative_position_bias(table, 2, 40, true, 128);
  ASSERT_EQ(bias.shape()[0], heads);
  ASSERT_EQ(bias.shape()[1], 2U);
  ASSERT_EQ(bias.shape()[2], 40U);
  // By hand (bidirectional, 32 buckets): query 0 at 38. Key 38: r = 0 -> 0. Key 39: r = 1 -> 17.
  // Key 30: r = -8 -> 8. Key 0: r = -38 -> 8 + floor(2 log2(38/8)) = 8 + floor(4.496) = 12.
  // Query 1 at 39: key 39 -> 0, key 0: r = -39 -> 8 + floor(2 log2(4.875)) = 8 + 4 = 12.
  EXPECT_EQ(bias(0, 0, 38), 0.0F);
  EXPECT_EQ(bias(1, 0, 39), 117.0F);
  EXPECT_EQ(bias(2, 0, 30), 208.0F);
  EXPECT_EQ(bias(0, 0, 0), 12.0F);
  EXPECT_EQ(bias(1, 1, 39), 100.0F);
  EXPECT_EQ(bias(2, 1, 0), 212.0F);
  // The whole tensor against the bucket function.
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 40; ++j)
        EXPECT_EQ(bias(h, i, j),
                  table(static_cast<std::size_t>(analysis::t5_relative_position_bucket(
                            static_cast<long long>(j) - static_cast<long long>(i + 38), true, 32, 128)),
                        h));
  EXPECT_TRUE(throws_error_naming([&] { analysis::t5_relative_position_bias(table, 0, 4, true, 128); }, {"seq_q"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::t5_relative_position_bias(table, 2, 0, true, 128); }, {"seq_k"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::t5_relative_position_bias(table, 2, 4, true, 8); }, {"max_distance"}));
  Tensor2 bad = table;
  bad(3, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { analysis::t5_relative_position_bias(bad, 2, 4, true, 128); }, {"table"}));
}

TEST(Ch02T5Bias, attention_with_t5_bias_matches_the_double_oracle) {
  // Per head h, the double oracle with mask.bias = the bias of head h; the table has N(0, 3^2)
  // entries so that the bias shapes the softmax. Tolerance as for chapter 00's attention:
  // attention_tolerance(d, seq_k, M, max|v|), M = the size of the terms of a score.
  for (const bool bidirectional : {true, false}) {
    const std::size_t heads = 4, nq = 37, nk = 150, d = 16;
    Rng rng(21);
    const Tensor3 q = rng.normal_tensor(heads, nq, d), k = rng.normal_tensor(heads, nk, d), v = rng.normal_tensor(heads, nk, d);
    const Tensor2 table = rng.normal_matrix(32, heads, 0, 3);
    const Tensor3 bias = analysis::t5_relative_position_bias(table, static_cast<long long>(nq), static_cast<long long>(nk),
                                                        bidirectional, 128);
    AttentionConfig cfg;
    cfg.mask.causal = !bidirectional;  // a decoder: causal, bottom-right as the bias
    const Tensor3 got = analysis::attention_with_head_bias(q, k, v, bias, cfg);
    for (std::size_t h = 0; h < heads; ++h) {
      const Tensor3 qh = xt::view(q, xt::range(h, h + 1), xt::all(), xt::all());
      const Tensor3 kh = xt::view(k, xt::range(h, h + 1), xt::all(), xt::all());
      const Tensor3 vh = xt::view(v, xt::range(h, h + 1), xt::all(), xt::all());
      AttentionConfig head_cfg = cfg;
      head_cfg.mask.bias = Tensor2(xt::view(bias, h, xt::all(), xt::all()));
      const DTensor3 expected = tvlab::testing::sdpa_oracle(qh, kh, vh, head_cfg);
      const double tol = attention_tolerance(d, nk, tvlab::testing::score_magnitude(qh, kh, head_cfg),
                                             static_cast<double>(xt::amax(xt::abs(vh))()));
      const Tensor3 got_h = xt::view(got, xt::range(h, h + 1), xt::all(), xt::all());
      EXPECT_TRUE(tvlab::testing::matches(got_h, expected, {tol, tvlab::testing::reduction_rtol(std::max(d, nk))},
                                          {std::string("attention_with_head_bias, T5 bias, ") +
                                               (bidirectional ? "bidirectional" : "causal") + ", head " + std::to_string(h),
                                           {"h", "i", "d"}, 21, "",
                                           "head h adds T[bucket(j - i'), h], i' = i + seq_k - seq_q, to its scaled scores"}));
    }
  }
}

TEST(Ch02T5Bias, attention_with_head_bias_rejects_bad_bias) {
  Rng rng(2);
  const Tensor3 q = rng.normal_tensor(2, 3, 4), k = rng.normal_tensor(2, 5, 4), v = rng.normal_tensor(2, 5, 4);
  const Tensor3 wrong = xt::zeros<float>({2UL, 5UL, 5UL});
  EXPECT_TRUE(throws_error_naming([&] { analysis::attention_with_head_bias(q, k, v, wrong); }, {"attention_with_head_bias", "bias"}));
  Tensor3 nan = xt::zeros<float>({2UL, 3UL, 5UL});
  nan(1, 2, 4) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { analysis::attention_with_head_bias(q, k, v, nan); }, {"attention_with_head_bias", "bias"}));
  // -inf hides a key: a row hidden everywhere gives 0.
  Tensor3 hide = xt::zeros<float>({2UL, 3UL, 5UL});
  for (std::size_t j = 0; j < 5; ++j) hide(0, 1, j) = -std::numeric_limits<float>::infinity();
  const Tensor3 out = analysis::attention_with_head_bias(q, k, v, hide);
  for (std::size_t c = 0; c < 4; ++c) EXPECT_EQ(out(0, 1, c), 0.0F);
}

}  // namespace
}  // namespace tvlab::ch02

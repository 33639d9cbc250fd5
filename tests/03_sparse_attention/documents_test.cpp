// Chapter 03: the documents' numbers on sparse attention, computed from their inputs with tvlab's
// patterns and calculators, and the errata they imply. Every expected value is derived here from
// first principles (a definition, a closed form, a count); where a document states something
// else, the test asserts the correct value and names the erratum (the chapter's Errata table).
// Citations: 000 = the book chapter "Transformer 演进与变体", 003 = the essay, 004 = chapter 8
// "现代大模型架构", with line numbers of ../shared/seeds.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tvlab/analysis/attention_cost.hpp"
#include "tvlab/analysis/receptive_field.hpp"
#include "tvlab/analysis/sparse_cost.hpp"
#include "tvlab/core/attention_patterns.hpp"

namespace tvlab::ch03 {
namespace {

using analysis::SparseAttentionCost;
using analysis::sliding_window_cost;
using analysis::sparse_attention_cost;

// The keys of row i, as a vector.
std::vector<std::size_t> row_keys(const SparsePattern& p, std::size_t i) {
  return {p.keys.begin() + static_cast<std::ptrdiff_t>(p.row_start[i]),
          p.keys.begin() + static_cast<std::ptrdiff_t>(p.row_start[i + 1])};
}

std::vector<std::size_t> range(std::size_t first, std::size_t last) {
  std::vector<std::size_t> r;
  for (std::size_t j = first; j <= last; ++j) r.push_back(j);
  return r;
}

TEST(Ch03Documents, x1_a_window_of_radius_3_shows_position_5_the_positions_2_to_8) {
  // 000 L21: w = 3, position 5 sees positions 2 to 8, a window of width 2w + 1.
  const long long w = 3;
  const std::size_t i = 5;
  const SparsePattern p = sliding_window_pattern(16, w, w);
  EXPECT_EQ(row_keys(p, i), range(i - 3, i + 3));  // |i - j| <= w
  EXPECT_EQ(p.row_size(i), 2 * 3 + 1u);
}

TEST(Ch03Documents, x2_n_8192_w_512_saves_the_same_factor_in_compute_and_storage) {
  // 000 L21: n = 8192, w = 512, "computation about 16x less, storage about 8x less".
  const std::size_t n = 8192;
  const double dense = static_cast<double>(n) * n;
  // The document's own window, |i - j| <= w (2w + 1 keys): n (2w + 1) pairs less the two corners
  // the sequence's ends cut off, w (w + 1).
  const SparseAttentionCost bidirectional = sliding_window_cost(n, 512, 512, 1, 64);
  EXPECT_EQ(bidirectional.attended_pairs, n * 1025.0 - 512.0 * 513.0);
  EXPECT_EQ(bidirectional.attended_pairs,
            sparse_attention_cost(sliding_window_pattern(n, 512, 512), 1, 64).attended_pairs);
  EXPECT_NEAR(bidirectional.compute_saving(), dense / (n * 1025.0 - 512.0 * 513.0), 1e-12);
  EXPECT_NEAR(bidirectional.compute_saving(), 8.25, 0.005);
  // Storage: the scores kept are exactly the pairs computed, so the factor is the same.
  EXPECT_EQ(bidirectional.storage_saving(), bidirectional.compute_saving());
  // Erratum 03.2: 16x arises only when each query sees about w = 512 keys (a causal window of 512
  // keys against the full n x n matrix, 16.5x; Longformer's convention, window 512 = radius 256,
  // 16.2x) -- and then storage falls 16x as well.
  const SparseAttentionCost causal = sliding_window_cost(n, 511, 0, 1, 64);
  const SparseAttentionCost radius_256 = sliding_window_cost(n, 256, 256, 1, 64);
  EXPECT_NEAR(causal.compute_saving(), dense / (n * 512.0 - 511.0 * 512.0 / 2), 1e-12);
  EXPECT_NEAR(causal.compute_saving(), 16.5, 0.02);
  EXPECT_NEAR(radius_256.compute_saving(), 16.2, 0.03);
  EXPECT_EQ(causal.storage_saving(), causal.compute_saving());
  // Against causal dense attention (what a causal model would otherwise compute), the causal
  // window saves 8.3x: the only way to see "16" and "8" is to compare against two different
  // dense baselines.
  EXPECT_NEAR(causal.saving_vs_causal(), (n * (n + 1) / 2.0) / (n * 512.0 - 511.0 * 512.0 / 2), 1e-12);
  EXPECT_NEAR(causal.saving_vs_causal(), 8.26, 0.005);
  // In bytes (float32 scores, one head): 268.4 MB dense, 32.5 MB for the 2w + 1 window.
  EXPECT_EQ(bidirectional.dense_score_bytes(), dense * 4);
  EXPECT_NEAR(bidirectional.score_bytes / 1e6, 32.54, 0.005);
}

TEST(Ch03Documents, x3_mistral_32_layers_of_window_4096) {
  // 000 L23: window 4096, 32 layers, "32 x 4096 = 131072 tokens" at layer 32.
  const std::size_t layers = 32, n = 200000, p = n - 1;
  // The Mistral paper's window, j in [i - W, i] (W + 1 keys): L W back.
  EXPECT_EQ(analysis::stacked_window_field(n, layers, 4096, 0, 1, p).reach_back, layers * 4096);
  // A window of W keys (j > i - W, Hugging Face's eager mask): L (W - 1) back.
  EXPECT_EQ(analysis::stacked_window_field(n, layers, 4095, 0, 1, p).reach_back, layers * 4095);
  // The exact experiment at a size that fits (W = 64): composing 32 causal windows.
  const std::size_t w = 64, small_n = layers * w + 10;
  const std::vector<bool> field =
      analysis::receptive_field(std::vector<SparsePattern>(layers, sliding_window_pattern(small_n, w, 0)), small_n - 1);
  const std::size_t first = static_cast<std::size_t>(std::find(field.begin(), field.end(), true) - field.begin());
  EXPECT_EQ(small_n - 1 - first, layers * w);
  EXPECT_EQ(analysis::count_reached(field), layers * w + 1);
}

TEST(Ch03Documents, x4_longformer_position_5000_sees_its_window_and_four_titles) {
  // 000 L31: n = 8192, w = 512, globals {0, 1000, 3000, 6000}; position 5000 sees 4488..5512 and
  // the four titles, title 3000 sees everything.
  const std::size_t n = 8192;
  const std::vector<std::size_t> titles = {0, 1000, 3000, 6000};
  const SparsePattern p = longformer_pattern(n, 512, titles, false);
  std::vector<std::size_t> expected = {0, 1000, 3000};  // the titles before the window
  for (std::size_t j : range(5000 - 512, 5000 + 512)) expected.push_back(j);
  expected.push_back(6000);
  EXPECT_EQ(row_keys(p, 5000), expected);
  EXPECT_EQ(p.row_size(5000), 2 * 512 + 1 + 4u);
  EXPECT_EQ(p.row_size(3000), n);
  // Every position sees the titles (symmetric global attention).
  for (std::size_t i = 0; i < n; i += 97)
    for (std::size_t g : titles) EXPECT_TRUE(p.allows(i, g)) << i << " -> " << g;
  // Erratum 03.4: Longformer's "window 512" (its default) is 256 on each side: position 5000 would
  // see 4744..5256 (513 keys), not 4488..5512.
  const SparsePattern longformer_default = longformer_pattern(n, 512 / 2, titles, false);
  EXPECT_EQ(row_keys(longformer_default, 5000).size(), 512 + 1 + 4u);
  EXPECT_TRUE(longformer_default.allows(5000, 5000 - 256) && !longformer_default.allows(5000, 5000 - 257));
}

TEST(Ch03Documents, x5_sixteen_k_tokens_is_16_to_32_times_512_to_1024) {
  // 000 L33: 16K tokens against 512-1024, "10-30x". Erratum 03.5.
  const double long_context = 16 * 1024;
  EXPECT_EQ(long_context / 1024, 16.0);
  EXPECT_EQ(long_context / 512, 32.0);
}

TEST(Ch03Documents, x6_twenty_odd_words_apart_need_3_or_4_window_layers) {
  // 000 L25: w = 8, the two words are "twenty-odd" apart; the document's chain takes 5 hops. Each
  // layer carries information at most w positions, so 20-29 positions take ceil(d / 8) = 3 or 4
  // layers; a chain of 5 is one path, not the shortest.
  const SparsePattern p = sliding_window_pattern(64, 8, 8);
  const std::vector<std::size_t> from_last = analysis::hops(p, 40);
  for (std::size_t distance = 20; distance <= 29; ++distance) {
    const std::size_t layers = analysis::layers_to_travel(distance, 8);
    EXPECT_EQ(layers, distance <= 24 ? 3u : 4u) << distance;
    EXPECT_EQ(from_last[40 - distance], layers);
  }
}

TEST(Ch03Documents, x7_one_float32_score_matrix_at_n_8192) {
  // 003 §3.1: n = 8192, float32, one attention matrix: 8192 x 8192 x 4 bytes, about 268 MB.
  const auto m = analysis::attention_matrix_memory(8192, 1, 1, analysis::DType::fp32, 1);
  EXPECT_EQ(m.bytes_per_head, 8192.0 * 8192 * 4);
  EXPECT_EQ(m.bytes_per_head, std::ldexp(1.0, 28));  // 2^28 B = 256 MiB = 268.4 MB
  EXPECT_NEAR(m.bytes_per_head / 1e6, 268.4, 0.05);
  // A layer of h heads holds h of them (erratum 00.2 of chapter 00): 32 heads, 8.6 GB.
  EXPECT_NEAR(analysis::attention_matrix_memory(8192, 32, 1, analysis::DType::fp32, 1).bytes_per_layer / 1e9, 8.59,
              0.005);
}

TEST(Ch03Documents, x8_sparse_attention_grows_linearly_not_quadratically) {
  // 000 L77: "both [sparse and Flash attention] are still O(n^2)". Erratum 03.8: with a fixed
  // window the pairs double when n doubles (O(n w)); dense pairs quadruple; the Sparse
  // Transformer with l = sqrt(n) grows by 2^1.5 (O(n sqrt n)).
  for (std::size_t n = 4096; n <= 65536; n *= 2) {
    const double window = sliding_window_cost(2 * n, 512, 512, 1, 64).attended_pairs /
                          sliding_window_cost(n, 512, 512, 1, 64).attended_pairs;
    const double dense = sliding_window_cost(2 * n, 2 * n, 2 * n, 1, 64).attended_pairs /
                         sliding_window_cost(n, n, n, 1, 64).attended_pairs;
    EXPECT_EQ(dense, 4.0);
    EXPECT_GT(window, 2.0);  // the ends' corners matter less and less
    EXPECT_LT(window, 2.0 + 2.0 * 512 / static_cast<double>(n));
  }
  const auto strided_pairs = [](std::size_t l) { return sparse_attention_cost(strided_pattern(l * l, l, 2), 1, 1).attended_pairs; };
  const double growth = strided_pairs(128) / strided_pairs(64);  // n x 4
  EXPECT_NEAR(growth, 8.0, 0.1);  // (4 n)^1.5 / n^1.5
}

TEST(Ch03Documents, f3_local_plus_global_costs_n_w_plus_n_g) {
  // 000 L27, 004 L80: a window plus g global tokens costs O(nw + ng): each ordinary row at most
  // 2w + 1 + g keys, each global row n; pairs <= n (2w + 1) + 2 n g.
  const std::size_t n = 8192, w = 512;
  const std::vector<std::size_t> globals = {0, 1000, 3000, 6000};
  const std::size_t g = globals.size();
  const SparseAttentionCost c = sparse_attention_cost(longformer_pattern(n, w, globals, false), 1, 64);
  // Exact, row by row from the definition: global rows n, the others their window plus the
  // globals outside it.
  double pairs = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::find(globals.begin(), globals.end(), i) != globals.end()) {
      pairs += n;
      continue;
    }
    const std::size_t first = i >= w ? i - w : 0, last = std::min(n - 1, i + w);
    pairs += static_cast<double>(last - first + 1);
    for (std::size_t x : globals) pairs += (x < first || x > last) ? 1 : 0;
  }
  EXPECT_EQ(c.attended_pairs, pairs);
  EXPECT_LE(c.attended_pairs, static_cast<double>(n * (2 * w + 1) + 2 * n * g));
  EXPECT_EQ(c.max_row_keys, n);
}

TEST(Ch03Documents, f5_f6_the_documents_sparse_transformer_patterns) {
  const std::size_t l = 16, n = l * l;
  // 004 L76, strided: "i - 1, ..., i - k and i - l, i - 2l, ...". Child et al.'s A1 and A2 also
  // contain i itself (erratum 03.6): the document's rows are tvlab's minus the diagonal.
  const SparsePattern child = strided_pattern(n, l, 2);
  Mask2 document = xt::zeros<bool>({n, n});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < i; ++j) document(i, j) = i - j <= l - 1 || (i - j) % l == 0;  // k = l - 1
  const Mask2 child_mask = child.to_mask();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) ASSERT_EQ(document(i, j), child_mask(i, j) && j != i) << i << ", " << j;
  // 004 L76, fixed: S_i = {j : floor(j / sqrt n) = b} u {j : j mod sqrt n = i mod sqrt n, j < i}.
  // That is the own block plus every l-th position back -- the strided pattern's A2 -- not Child
  // et al.'s fixed pattern, whose second set is the last c columns of each block, the same columns
  // for every query (erratum 03.7).
  Mask2 fixed_document = xt::zeros<bool>({n, n});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) fixed_document(i, j) = j / l == i / l || j % l == i % l;
  const SparsePattern union_form = pattern_union({fixed_pattern(n, l, 1, 0), strided_pattern(n, l, 1)});
  EXPECT_EQ(union_form.to_mask(), fixed_document);
  for (std::size_t c = 1; c <= l; ++c) EXPECT_NE(fixed_pattern(n, l, c, 2).to_mask(), fixed_document) << "c = " << c;
  // "About 2 sqrt(n) keys each": the largest row has 2 sqrt(n) - 1 keys; the average is sqrt(n)
  // for the document's fixed pattern ((i mod l) + 1 + floor(i / l) keys in row i) and between
  // sqrt(n) and 1.5 sqrt(n) for the strided one (min(l, i + 1) + floor(i / l)).
  const SparseAttentionCost document_fixed = sparse_attention_cost(union_form, 1, 1);
  EXPECT_EQ(document_fixed.max_row_keys, 2 * l - 1);
  EXPECT_DOUBLE_EQ(document_fixed.mean_row_keys, static_cast<double>(l));
  const SparseAttentionCost strided = sparse_attention_cost(child, 1, 1);
  EXPECT_EQ(strided.max_row_keys, 2 * l - 1);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += static_cast<double>(std::min(l, i + 1) + i / l);
  EXPECT_DOUBLE_EQ(strided.mean_row_keys, sum / n);
  EXPECT_GT(strided.mean_row_keys, static_cast<double>(l));
  EXPECT_LT(strided.mean_row_keys, 1.5 * static_cast<double>(l));
}

TEST(Ch03Documents, f7_table_8_4_keys_per_query) {
  // 004 L88, Table 8-4: Sparse Transformer O(sqrt n) keys, Longformer O(w + g), BigBird O(w + r + g).
  // Sparse Transformer: the largest row over sqrt(n) stays below 2 as n grows.
  for (std::size_t l : {8, 16, 32, 64})
    EXPECT_LT(sparse_attention_cost(strided_pattern(l * l, l, 2), 1, 1).max_row_keys, 2 * l);
  // Longformer: no ordinary row sees more than 2w + 1 + g keys, whatever n.
  for (std::size_t n : {1024, 4096}) {
    const SparsePattern p = longformer_pattern(n, 64, {0, n / 2}, false);
    std::size_t widest = 0;
    for (std::size_t i = 1; i < n; ++i)
      if (i != n / 2) widest = std::max(widest, p.row_size(i));
    EXPECT_EQ(widest, 2 * 64 + 1 + 2u) << n;
  }
  // BigBird ITC: an interior row sees (3 + r + g) blocks of b: the window w = 3b, r b random keys,
  // g b global keys, whatever n.
  for (std::size_t n : {1024, 4096}) {
    const std::size_t b = 64, r = 3, g = 2;
    const SparsePattern p = bigbird_pattern(n, b, g, r, 1);
    EXPECT_EQ(p.row_size(n / 2), (3 + r + g) * b) << n;
  }
}

TEST(Ch03Documents, c4_the_strided_pattern_needs_two_hops_not_a_logarithmic_number) {
  // 004 L76: the strided pattern "covers the text with a logarithmic number of hops". With one
  // stride l ~ sqrt(n) every earlier position is at most 2 hops away at any n (erratum 03.9);
  // logarithmic hop counts belong to dilations that double from layer to layer (WaveNet).
  for (std::size_t l : {8, 32}) {
    const std::size_t n = l * l, p = n - 1;
    const std::vector<std::size_t> d = analysis::hops(strided_pattern(n, l, 2), p);
    EXPECT_EQ(*std::max_element(d.begin(), d.end()), 2u) << "n " << n;
  }
}

TEST(Ch03Documents, f9_global_tokens_make_paths_of_two_steps) {
  // 000 L27: with global tokens ordinary tokens are "usually two steps" apart; without them
  // information hops ceil(distance / w) layers.
  const std::size_t n = 8192;
  const std::vector<std::size_t> d = analysis::hops(longformer_pattern(n, 512, {0, 1000, 3000, 6000}, false), 5000);
  EXPECT_EQ(*std::max_element(d.begin(), d.end()), 2u);
  const std::vector<std::size_t> window_only = analysis::hops(sliding_window_pattern(n, 512, 512), 5000);
  EXPECT_EQ(window_only[0], analysis::layers_to_travel(5000, 512));
  EXPECT_EQ(window_only[0], 10u);  // ceil(5000 / 512)
}

}  // namespace
}  // namespace tvlab::ch03

// Chapter 03 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/student/attention_patterns.hpp"
#include "tvlab/student/receptive_field.hpp"
#include "tvlab/student/sparse_attention.hpp"

namespace tvlab::student {

SparsePattern bigbird_pattern(std::size_t n, std::size_t block, std::size_t global_blocks, std::size_t random_blocks,
                              std::uint64_t seed) {
  // BEGIN EXERCISE 03.1 "BigBird's pattern: global, window and random blocks" "BigBird"
  const char* fn = "bigbird_pattern";
  require(block > 0, fn, "block must be positive");
  require(n % block == 0, fn, "n (", n, ") must be a multiple of block (", block, ")");
  const std::size_t blocks = n / block, g = global_blocks, r = random_blocks;
  require(g <= blocks, fn, "global_blocks (", g, ") exceeds the ", blocks, " blocks");
  require(r == 0 || blocks >= g + 3 + r, fn, "random_blocks (", r, ") needs at least g + 3 + r = ", g + 3 + r,
          " blocks, not ", blocks);
  // The first ceil(g/2) blocks and the last floor(g/2) are global.
  const auto global = [&](std::size_t kb) { return kb < (g + 1) / 2 || kb + g / 2 >= blocks; };
  Rng rng(seed);
  SparsePattern p;
  p.seq_q = p.seq_k = n;
  p.row_start.push_back(0);
  for (std::size_t qb = 0; qb < blocks; ++qb) {
    std::vector<bool> attends(blocks, global(qb));  // a global block attends to every key block
    if (!global(qb)) {
      std::vector<std::size_t> candidates;  // neither global nor in the window {qb - 1, qb, qb + 1}
      for (std::size_t kb = 0; kb < blocks; ++kb) {
        const bool in_window = kb + 1 >= qb && kb <= qb + 1;
        attends[kb] = global(kb) || in_window;
        if (!attends[kb]) candidates.push_back(kb);
      }
      // r draws without replacement: swap candidate t with a uniform one among t .. m - 1.
      for (std::size_t t = 0; t < r; ++t) {
        std::swap(candidates[t], candidates[t + rng.next_u64() % (candidates.size() - t)]);
        attends[candidates[t]] = true;
      }
    }
    // Every row of the query block gets the same keys: all positions of the chosen key blocks.
    for (std::size_t row = 0; row < block; ++row) {
      for (std::size_t kb = 0; kb < blocks; ++kb)
        if (attends[kb])
          for (std::size_t j = kb * block; j < (kb + 1) * block; ++j) p.keys.push_back(static_cast<std::uint32_t>(j));
      p.row_start.push_back(p.keys.size());
    }
  }
  return p;
  // END EXERCISE
}

std::vector<bool> receptive_field(const std::vector<SparsePattern>& layers, std::size_t position) {
  // BEGIN EXERCISE 03.2 "the receptive field of stacked layers" "Global tokens and the receptive field"
  const char* fn = "receptive_field";
  require(!layers.empty(), fn, "layers is empty: give at least one layer's pattern");
  const std::size_t n = layers[0].seq_q;
  for (const SparsePattern& layer : layers) validate_pattern(fn, "layers", layer, n, n);
  require(position < n, fn, "position (", position, ") must be below the sequence length n (", n, ")");
  // Walk back from the output: the last layer reads S_position, the layer below it the keys of
  // every row in that set, and so on down to the inputs.
  std::vector<bool> reach(n, false);
  reach[position] = true;
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
    std::vector<bool> below(n, false);
    for (std::size_t i = 0; i < n; ++i)
      if (reach[i])
        for (std::size_t e = layer->row_start[i]; e < layer->row_start[i + 1]; ++e) below[layer->keys[e]] = true;
    reach = std::move(below);
  }
  return reach;
  // END EXERCISE
}

namespace {

// Query i of head h over the keys [keys.begin, keys.end) of its window: the online softmax of
// chapter 04, one key at a time, in double.
void attend_window_row(const Tensor3& q, const Tensor3& k, const Tensor3& v, double scale, std::size_t h,
                       std::size_t i, IndexRange keys, FlashOutput& result) {
  // BEGIN EXERCISE 03.3 "the inner loop of the sliding-window kernel" "Why blocks: the block-sparse flash kernel"
  const std::size_t d = q.shape()[2], d_v = v.shape()[2];
  double m = -std::numeric_limits<double>::infinity(), l = 0.0;
  std::vector<double> acc(d_v, 0.0);
  for (std::size_t j = keys.begin; j < keys.end; ++j) {
    double dot = 0.0;
    for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(q(h, i, c)) * k(h, j, c);
    // m' = max(m, s_j);  l' = l e^{m - m'} + e^{s_j - m'};  acc' = acc e^{m - m'} + e^{s_j - m'} v_j
    const double s = scale * dot, m_new = std::max(m, s);
    const double rescale = std::exp(m - m_new), p = std::exp(s - m_new);  // e^{-inf} = 0 before the first key
    l = l * rescale + p;
    for (std::size_t c = 0; c < d_v; ++c) acc[c] = acc[c] * rescale + p * v(h, j, c);
    m = m_new;
  }
  // o_i = acc / l and lse_i = m + ln l; a row without keys gives 0 and -inf.
  for (std::size_t c = 0; c < d_v; ++c) result.out(h, i, c) = l > 0 ? static_cast<float>(acc[c] / l) : 0.0f;
  result.lse(h, i) = l > 0 ? static_cast<float>(m + std::log(l)) : -std::numeric_limits<float>::infinity();
  // END EXERCISE
}

}  // namespace

FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale) {
  const char* fn = "sliding_window_attention";
  const double s = validate_sparse_attention(fn, q, k, v, scale);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1];
  require(window.left >= 0, fn, "window.left (", window.left, ") must be >= 0");
  require(window.right >= 0, fn, "window.right (", window.right, ") must be >= 0");
  require(seq_q <= seq_k, fn, "q has ", seq_q, " rows and k ", seq_k,
          ": the window places the queries at the last seq_q of the seq_k positions, so seq_q <= seq_k");
  const AttentionMask mask{.window = window};
  FlashOutput result{Tensor3::from_shape({heads, seq_q, v.shape()[2]}), Tensor2::from_shape({heads, seq_q}), 0, 0};
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < seq_q; ++i)
      // S_i = [i' - w_l, i' + w_r] within [0, n_k), i' = i + n_k - n_q: a range, no list of keys
      attend_window_row(q, k, v, s, h, i, mask.key_range(i, seq_q, seq_k), result);
  return result;
}

}  // namespace tvlab::student

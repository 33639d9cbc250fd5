// exercises/03_sparse_attention/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: feb37e32c963e57f

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
  // EXERCISE 03.1 begins: BigBird's pattern: global, window and random blocks. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 03.1: BigBird's pattern: global, window and random blocks; read chapters/03_sparse_attention/README.md, section \"BigBird\"");
  // EXERCISE 03.1 ends
}

std::vector<bool> receptive_field(const std::vector<SparsePattern>& layers, std::size_t position) {
  // EXERCISE 03.2 begins: the receptive field of stacked layers. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 03.2: the receptive field of stacked layers; read chapters/03_sparse_attention/README.md, section \"Global tokens and the receptive field\"");
  // EXERCISE 03.2 ends
}

namespace {

// Query i of head h over the keys [keys.begin, keys.end) of its window: the online softmax of
// chapter 04, one key at a time, in double.
void attend_window_row(const Tensor3& q, const Tensor3& k, const Tensor3& v, double scale, std::size_t h,
                       std::size_t i, IndexRange keys, FlashOutput& result) {
  // EXERCISE 03.3 begins: the inner loop of the sliding-window kernel. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 03.3: the inner loop of the sliding-window kernel; read chapters/03_sparse_attention/README.md, section \"Why blocks: the block-sparse flash kernel\"");
  // EXERCISE 03.3 ends
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

// Chapter 03's tests of one implementation's own counts (not a suite over the registry, so the
// exercise program does not run them): the optimized window kernel's tile skipping.

#include <gtest/gtest.h>

#include "tvlab/core/rng.hpp"
#include "tvlab/opt/sparse_attention.hpp"

namespace tvlab::sparse {
namespace {

// The window kernel without a layout visits, for each query tile of 64 rows, only the key tiles of
// 64 that overlap the rows' keys [i' - w_l, i' + w_r].
TEST(SlidingWindowTiles, opt_visits_only_the_key_tiles_inside_the_window) {
  Rng rng(31);
  const Tensor3 q = rng.normal_tensor(2, 300, 8), k = rng.normal_tensor(2, 300, 8);
  // Bidirectional radius 70: query tile t (rows 64t .. 64t + 63) sees keys 64t - 70 .. 64t + 133,
  // key tiles t - 2 .. t + 2 within 0..4: 3 + 4 + 5 + 4 + 3 = 19 of the 5 x 5 tiles, per head.
  const FlashOutput two_sided = opt::sliding_window_attention(q, k, k, {70, 70});
  EXPECT_EQ(two_sided.tiles_computed, 2 * 19U) << "n 300, radius 70, tiles 64: query tile t needs key tiles t-2..t+2";
  EXPECT_EQ(two_sided.tiles_skipped, 2 * 6U) << "n 300, radius 70, tiles 64: 25 - 19 = 6 tiles per head are skipped";
  // Causal window of 10 keys: query tile t sees keys 64t - 9 .. 64t + 63: tiles t - 1 and t (t >= 1).
  const FlashOutput causal = opt::sliding_window_attention(q, k, k, {9, 0});
  EXPECT_EQ(causal.tiles_computed, 2 * 9U) << "n 300, causal window of 10 keys: query tile 0 needs key tile 0, "
                                              "tiles 1..4 two key tiles each";
}

}  // namespace
}  // namespace tvlab::sparse

// Chapter 05, the optimized decode step over a paged KV cache: with any number of splits (ones
// that begin and end inside a block of the cache), on both score paths (dot products for a few
// query heads per kv head, the micro-kernel for 16 or more) and with head dimensions that are not a
// whole number of registers, it equals the double-precision reference; splits beyond the length are
// refused by name.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/paged_attention.hpp"
#include "tvlab/ref/paged_attention.hpp"

namespace tvlab::opt {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

struct PagedCase {
  std::size_t heads, kv_heads, d, block_size, length;
};

std::string label_of(const PagedCase& c) {
  return "h " + std::to_string(c.heads) + ", g " + std::to_string(c.kv_heads) + ", d " + std::to_string(c.d) +
         ", block " + std::to_string(c.block_size) + ", " + std::to_string(c.length) + " tokens";
}

// A cache holding one sequence of `length` random tokens whose blocks are not in order: a shorter
// sequence is written first, then freed, so that ours reuses its blocks after fresh ones. The
// unwritten slots of the last block hold NaN (the pool's fill): a kernel that reads past the
// length returns NaN. `table` is the sequence's block table with its full blocks shuffled (the
// last, partly written one stays last): attention sums over positions, so the step attends to the
// same (key, value) pairs in another order, and the reference given the same table is the expected
// result. Consecutive positions then lie in blocks far apart in the pool, so a kernel that reads
// past the end of a block instead of looking up the next one reads another block's rows.
struct Paged {
  PagedKvCache cache;
  SequenceId seq;
  Tensor2 q;
  std::vector<std::size_t> table;
};
Paged make_paged(const PagedCase& c, unsigned long long seed) {
  Rng rng(seed);
  const std::size_t blocks = (c.length + c.block_size - 1) / c.block_size;
  Paged p{PagedKvCache({.num_blocks = blocks + 3, .block_size = c.block_size, .num_kv_heads = c.kv_heads, .head_dim = c.d}),
          0, rng.normal_matrix(c.heads, c.d)};
  const SequenceId first = p.cache.add_sequence();
  const std::size_t first_tokens = 2 * c.block_size + 1;
  p.cache.append(first, rng.normal_tensor(c.kv_heads, first_tokens, c.d), rng.normal_tensor(c.kv_heads, first_tokens, c.d));
  const SequenceId spacer = p.cache.add_sequence();
  p.cache.append(spacer, rng.normal_tensor(c.kv_heads, 1, c.d), rng.normal_tensor(c.kv_heads, 1, c.d));
  p.cache.free(first);
  p.seq = p.cache.add_sequence();
  Tensor3 k = rng.normal_tensor(c.kv_heads, c.length, c.d);
  k(0, c.length - 1, 0) = 5.0f;  // an outlier key, so that the softmax is not flat
  p.cache.append(p.seq, k, rng.normal_tensor(c.kv_heads, c.length, c.d));
  p.table = p.cache.block_table(p.seq);
  const std::size_t full_blocks = c.length / c.block_size;
  for (std::size_t i = full_blocks; i > 1; --i)  // Fisher-Yates over the full blocks
    std::swap(p.table[i - 1], p.table[rng.next_u64() % i]);
  return p;
}

void PrintTo(const PagedCase& c, std::ostream* out) { *out << label_of(c); }

class PagedDecode : public ::testing::TestWithParam<PagedCase> {};

TEST_P(PagedDecode, every_number_of_splits_matches_the_reference) {
  const PagedCase c = GetParam();
  const unsigned long long seed = 31 * c.heads + 7 * c.kv_heads + c.length;
  const Paged p = make_paged(c, seed);
  const std::vector<std::size_t>& table = p.table;
  const GqaDecodeOutput expected = ref::paged_decode_attention_with_lse(p.q, p.cache, table, c.length);
  const DTensor2 expected_out = xt::cast<double>(expected.out);
  const DTensor1 expected_lse = xt::cast<double>(expected.lse);
  // Scores: dot products of d unit normals (an outlier of 5); the output a weighted average of
  // `length` values of order 1. Both the reference (double, then rounded) and the kernel (float)
  // differ from the exact result by a few roundings of such sums.
  const Tolerance tol{1e-5, reduction_rtol(std::max(c.d, c.length))};
  // 0: this machine's choice. The others cut the positions at multiples of length / splits, which
  // for these lengths fall inside blocks of the cache: a split that begins inside a block must
  // still read each block's rows from that block only.
  for (const std::size_t splits : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7},
                                   std::min<std::size_t>(64, c.length), c.length}) {
    if (splits > c.length) continue;
    const GqaDecodeOutput got = paged_decode_attention_split_k(p.q, p.cache, table, c.length, std::nullopt, splits);
    const std::string what = "paged_decode_attention, " + label_of(c) + ", " + std::to_string(splits) + " splits";
    EXPECT_TRUE(matches(got.out, expected_out, tol,
                        {what + ": out",
                         {"head", "e"},
                         seed,
                         "",
                         "a split's positions read block by block through the table; the splits' softmax states "
                         "merged with weights e^{m_s - m} / l"}));
    EXPECT_TRUE(matches(got.lse, expected_lse, {1e-5, 1e-6},
                        {what + ": lse", {"head"}, seed, "", "L = m + ln l over the merged splits"}));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedDecode,
    ::testing::Values(PagedCase{8, 2, 16, 16, 100},    // GQA, dot products, 100 = 6 blocks + 4
                      PagedCase{32, 8, 128, 16, 1001},  // the benchmark's shape, 2 blocks of 512 positions
                      PagedCase{4, 4, 24, 7, 300},      // MHA, block 7, d not a whole number of registers
                      PagedCase{32, 1, 64, 16, 777},    // MQA: the micro-kernel, blocks of 64 positions
                      PagedCase{16, 2, 40, 5, 130},     // micro-kernel with d 40 (values padded) and block 5
                      PagedCase{3, 1, 8, 16, 1}),       // one token
    [](const ::testing::TestParamInfo<PagedCase>& info) {
      const PagedCase& c = info.param;
      return "h" + std::to_string(c.heads) + "_g" + std::to_string(c.kv_heads) + "_d" + std::to_string(c.d) + "_b" +
             std::to_string(c.block_size) + "_n" + std::to_string(c.length);
    });

TEST(PagedDecodeErrors, more_splits_than_tokens_name_splits) {
  const Paged p = make_paged({4, 2, 8, 4, 6}, 3);
  const std::vector<std::size_t>& table = p.cache.block_table(p.seq);
  EXPECT_TRUE(throws_error_naming([&] { paged_decode_attention_split_k(p.q, p.cache, table, 6, std::nullopt, 7); },
                                  {"paged_decode_attention", "splits (7)", "context_len (6)"}));
  EXPECT_NO_THROW(paged_decode_attention_split_k(p.q, p.cache, table, 6, std::nullopt, 6));
  // The table is checked against the cache, as in the reference: a block past the pool is named.
  EXPECT_TRUE(throws_error_naming(
      [&] { paged_decode_attention_split_k(p.q, p.cache, std::vector<std::size_t>{table[0], 99}, 6, std::nullopt, 1); },
      {"paged_decode_attention", "block_table[1] = 99", "out of range"}));
}

}  // namespace
}  // namespace tvlab::opt

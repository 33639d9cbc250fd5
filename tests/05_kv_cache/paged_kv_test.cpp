// Chapter 05, the paged KV cache (vLLM's PagedAttention): decode attention through block tables
// equals attention over the same keys and values laid out contiguously, for any block size; fork
// shares blocks, the first write to a shared block copies it, free gives every block back; the
// reference counts always equal the number of tables that point at a block; and every refused call
// leaves the cache exactly as it was. Then the memory a workload wastes: paged (the last block's
// unused slots, about (b - 1)/2 per sequence) against preallocating the maximum length.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/testing.hpp"
#include "kv_test_helpers.hpp"
#include "tvlab/analysis/paged_waste.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/paged_attention.hpp"

namespace tvlab::ch05 {
namespace {

using tvlab::ch05_testing::expand_heads;
using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

// Column t of x [heads, seq, dim]: one token's vectors of every head, [heads, dim].
Tensor2 token(const Tensor3& x, std::size_t t) { return xt::view(x, xt::all(), t, xt::all()); }

// Everything a PagedKvCache holds, read through its public interface: what a refused call must not change.
struct Snapshot {
  std::map<SequenceId, std::vector<std::size_t>> tables;
  std::map<SequenceId, std::size_t> lengths;
  std::vector<std::size_t> ref_counts, free_list;
  std::vector<float> keys, values;
  std::size_t copies = 0;

  explicit Snapshot(const PagedKvCache& cache)
      : free_list(cache.free_list()),
        keys(cache.key_blocks().begin(), cache.key_blocks().end()),
        values(cache.value_blocks().begin(), cache.value_blocks().end()),
        copies(cache.copy_on_write_count()) {
    for (const SequenceId s : cache.sequences()) {
      tables[s] = cache.block_table(s);
      lengths[s] = cache.length(s);
    }
    for (std::size_t b = 0; b < cache.num_blocks(); ++b) ref_counts.push_back(cache.ref_count(b));
  }
  // Bit for bit: the never-written slots hold NaN, which == would call different from itself.
  bool operator==(const Snapshot& o) const {
    return tables == o.tables && lengths == o.lengths && ref_counts == o.ref_counts && free_list == o.free_list &&
           copies == o.copies && keys.size() == o.keys.size() && values.size() == o.values.size() &&
           std::memcmp(keys.data(), o.keys.data(), keys.size() * sizeof(float)) == 0 &&
           std::memcmp(values.data(), o.values.data(), values.size() * sizeof(float)) == 0;
  }
};

// ------------------------------------------------------------------------------ paged == contiguous

struct PagedCase {
  std::size_t num_heads, num_kv_heads, head_dim, length, block_size;
};

// Two sequences are appended token by token in turn, so their blocks interleave in the pool and
// each table is a scattered list of blocks; then each sequence's query attends through its table.
// The result must equal the double-precision oracle of chapter 00 over the contiguous keys and
// values (expanded from g to h heads). The reference accumulates in double in another order than
// the oracle (an error near 1e-16 relative) and rounds once to float at the end (half an ulp,
// 2^-24 relative): rtol 2^-23 covers both, and atol 1e-12 covers outputs near 0.
TEST(Ch05PagedKv, decode_attention_equals_contiguous_attention_for_every_block_size) {
  const PagedCase cases[] = {{8, 2, 16, 37, 1},  {8, 2, 16, 37, 3},  {8, 2, 16, 37, 5},  {8, 2, 16, 37, 16},
                             {4, 4, 8, 50, 7},   {6, 1, 12, 33, 16}, {3, 3, 4, 1, 16},   {2, 1, 32, 64, 16},
                             {4, 2, 8, 29, 64}};
  for (const PagedCase& c : cases) {
    const std::string label = "h " + std::to_string(c.num_heads) + ", g " + std::to_string(c.num_kv_heads) +
                              ", d " + std::to_string(c.head_dim) + ", length " + std::to_string(c.length) +
                              ", block_size " + std::to_string(c.block_size);
    const unsigned long long seed = 500 + c.length * 7 + c.block_size;
    Rng rng(seed);
    const std::size_t blocks_per_seq = (c.length + c.block_size - 1) / c.block_size;
    PagedKvCache cache({.num_blocks = 2 * blocks_per_seq + 3, .block_size = c.block_size,
                        .num_kv_heads = c.num_kv_heads, .head_dim = c.head_dim});
    const SequenceId a = cache.add_sequence(), b = cache.add_sequence();
    std::vector<Tensor3> k, v, q;
    for (int s = 0; s < 2; ++s) {
      k.push_back(rng.normal_tensor(c.num_kv_heads, c.length, c.head_dim));
      v.push_back(rng.normal_tensor(c.num_kv_heads, c.length, c.head_dim));
      // Queries with a spread of 2 so that the softmax is far from flat; for length 29, a spread of
      // 300 gives scores in the thousands (a softmax that overflows without its maximum subtracted).
      q.push_back(rng.normal_tensor(c.num_heads, 1, c.head_dim, 0.0, c.length == 29 ? 300.0 : 2.0));
    }
    for (std::size_t t = 0; t < c.length; ++t) {
      cache.append(a, token(k[0], t), token(v[0], t));
      cache.append(b, token(k[1], t), token(v[1], t));
    }
    if (blocks_per_seq > 1) {
      // Without interleaving, the test would not show that the table is followed.
      EXPECT_NE(cache.block_table(a)[1], cache.block_table(a)[0] + 1) << label << ": blocks should interleave";
    }
    for (const SequenceId s : {a, b}) {
      const Tensor3 q_t = q[s];
      const Tensor2 query = xt::view(q_t, xt::all(), 0, xt::all());
      const DTensor3 expected =
          tvlab::testing::sdpa_oracle(q_t, expand_heads(k[s], c.num_heads), expand_heads(v[s], c.num_heads), {});
      const DTensor2 expected_rows = xt::view(expected, xt::all(), 0, xt::all());
      EXPECT_TRUE(matches(ref::paged_decode_attention(query, cache, s), expected_rows,
                          Tolerance{1e-12, std::ldexp(1.0, -23)},
                          {"paged_decode_attention, sequence " + std::to_string(s) + ", " + label,
                           {"head", "c"}, seed, "",
                           "token t of the sequence is in block table[t / block_size], slot t mod block_size; "
                           "query head i reads kv head i / (num_heads / num_kv_heads)"}));
      // The cache also gives the contiguous tensors back unchanged.
      EXPECT_EQ(cache.gather_keys(s), k[s]) << label;
      EXPECT_EQ(cache.gather_values(s), v[s]) << label;
    }
  }
}

// The kernel form takes any table and context length: attending to the first n tokens of a
// sequence equals the oracle over those n tokens (a prefix, as a scheduler computing a step for a
// shorter context would pass), including a prefix that ends inside a block.
TEST(Ch05PagedKv, a_table_and_a_shorter_context_length_attend_to_that_prefix) {
  const std::size_t h = 4, g = 2, d = 8, length = 23, b = 5;
  Rng rng(91);
  const Tensor3 k = rng.normal_tensor(g, length, d), v = rng.normal_tensor(g, length, d);
  const Tensor3 q = rng.normal_tensor(h, 1, d, 0.0, 2.0);
  PagedKvCache cache({.num_blocks = 6, .block_size = b, .num_kv_heads = g, .head_dim = d});
  const SequenceId s = cache.add_sequence();
  cache.append(s, k, v);
  for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{12}, length}) {
    const Tensor3 k_n = xt::view(k, xt::all(), xt::range(0, n), xt::all());
    const Tensor3 v_n = xt::view(v, xt::all(), xt::range(0, n), xt::all());
    const DTensor3 expected = tvlab::testing::sdpa_oracle(q, expand_heads(k_n, h), expand_heads(v_n, h), {});
    const DTensor2 expected_rows = xt::view(expected, xt::all(), 0, xt::all());
    const Tensor2 query = xt::view(q, xt::all(), 0, xt::all());
    // Tolerance as in the test above.
    EXPECT_TRUE(matches(ref::paged_decode_attention(query, cache, cache.block_table(s), n), expected_rows,
                        Tolerance{1e-12, std::ldexp(1.0, -23)},
                        {"paged_decode_attention over the first " + std::to_string(n) + " tokens", {"head", "c"}, 91,
                         "", "only tokens t < context_len take part"}));
  }
}

// A batch of sequences, two of them forked from a third (sharing its blocks), attends in one call:
// each row equals the single-sequence call bit for bit (the same loops over the same numbers).
TEST(Ch05PagedKv, a_batch_of_sequences_attends_row_by_row) {
  const std::size_t h = 4, g = 2, d = 8, b = 4;
  Rng rng(12);
  PagedKvCache cache({.num_blocks = 16, .block_size = b, .num_kv_heads = g, .head_dim = d});
  const SequenceId prompt = cache.add_sequence();
  cache.append(prompt, rng.normal_tensor(g, 10, d), rng.normal_tensor(g, 10, d));
  const SequenceId sample1 = cache.fork(prompt), sample2 = cache.fork(prompt);
  cache.append(sample1, rng.normal_matrix(g, d), rng.normal_matrix(g, d));
  cache.append(sample2, rng.normal_tensor(g, 3, d), rng.normal_tensor(g, 3, d));
  EXPECT_LT(cache.blocks_in_use(), 3 * cache.block_table(prompt).size()) << "the forks share the prompt's full blocks";
  const std::vector<SequenceId> seqs = {sample2, prompt, sample1};
  const Tensor3 q = rng.normal_tensor(seqs.size(), h, d);
  const Tensor3 out = ref::paged_decode_attention(q, cache, seqs);
  for (std::size_t r = 0; r < seqs.size(); ++r) {
    const Tensor2 q_r = xt::view(q, r);
    EXPECT_EQ(Tensor2(xt::view(out, r)), ref::paged_decode_attention(q_r, cache, seqs[r])) << "row " << r;
  }
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(q, cache, std::vector<SequenceId>{sample1, prompt}); },
                                  {"paged_decode_attention", "q has 3 rows", "seqs has 2"}));
  EXPECT_TRUE(throws_error_naming(
      [&] { ref::paged_decode_attention(q, cache, std::vector<SequenceId>{sample1, 42, prompt}); },
      {"paged_decode_attention", "seqs[1] (42)"}));
}

// ------------------------------------------------------------------------ fork, copy-on-write, free

// A walk through Section 4.4 of the vLLM paper with blocks of 4 tokens: a prompt of 6 tokens fills
// block 0 and half of block 1; fork shares both; the child's first append finds block 1 shared and
// copies it; the parent's next append writes in place; free returns blocks as their counts reach 0.
TEST(Ch05PagedKv, fork_shares_blocks_and_the_first_write_to_a_shared_block_copies_it) {
  const std::size_t b = 4, g = 2, d = 3, n = 8;
  Rng rng(17);
  PagedKvCache cache({.num_blocks = n, .block_size = b, .num_kv_heads = g, .head_dim = d});
  const Tensor3 prompt_k = rng.normal_tensor(g, 6, d), prompt_v = rng.normal_tensor(g, 6, d);
  const SequenceId parent = cache.add_sequence();
  cache.append(parent, prompt_k, prompt_v);
  const std::vector<std::size_t> parent_table = cache.block_table(parent);
  ASSERT_EQ(parent_table.size(), 2U) << "6 tokens in blocks of 4 take ceil(6 / 4) = 2 blocks";
  const std::size_t first = parent_table[0], last = parent_table[1];
  EXPECT_EQ(cache.ref_count(first), 1U);
  EXPECT_EQ(cache.ref_count(last), 1U);
  EXPECT_EQ(cache.free_blocks(), n - 2);
  const Tensor4 pool_before_fork_k = cache.key_blocks();

  // fork: the same table, each block referenced twice, nothing allocated or copied.
  const SequenceId child = cache.fork(parent);
  EXPECT_EQ(cache.block_table(child), parent_table);
  EXPECT_EQ(cache.length(child), 6U);
  EXPECT_EQ(cache.ref_count(first), 2U);
  EXPECT_EQ(cache.ref_count(last), 2U);
  EXPECT_EQ(cache.free_blocks(), n - 2) << "fork must not allocate";
  EXPECT_EQ(cache.blocks_in_use(), 2U);
  EXPECT_EQ(cache.copy_on_write_count(), 0U);
  EXPECT_EQ(cache.gather_keys(child), prompt_k);

  // The child appends: its last block (2 of 4 slots used) is shared, so it is copied first.
  const Tensor2 child_k = rng.normal_matrix(g, d), child_v = rng.normal_matrix(g, d);
  cache.append(child, child_k, child_v);
  const std::vector<std::size_t> child_table = cache.block_table(child);
  ASSERT_EQ(child_table.size(), 2U);
  EXPECT_EQ(child_table[0], first) << "the full first block stays shared";
  EXPECT_NE(child_table[1], last) << "the shared, partly filled block must be copied before the write";
  const std::size_t copy = child_table[1];
  EXPECT_EQ(cache.copy_on_write_count(), 1U);
  EXPECT_EQ(cache.ref_count(first), 2U);
  EXPECT_EQ(cache.ref_count(last), 1U) << "the parent alone keeps the original";
  EXPECT_EQ(cache.ref_count(copy), 1U);
  EXPECT_EQ(cache.free_blocks(), n - 3);
  // The parent is untouched: its table, its tokens, and every slot of its blocks.
  EXPECT_EQ(cache.block_table(parent), parent_table);
  EXPECT_EQ(cache.gather_keys(parent), prompt_k);
  EXPECT_EQ(cache.gather_values(parent), prompt_v);
  for (const std::size_t block : parent_table) {
    const Tensor3 before = xt::view(pool_before_fork_k, block), after = xt::view(cache.key_blocks(), block);
    EXPECT_TRUE(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0)
        << "block " << block << " of the parent changed";
  }
  // The child holds the prompt and then its own token.
  const Tensor3 child_keys = cache.gather_keys(child);
  EXPECT_EQ(Tensor3(xt::view(child_keys, xt::all(), xt::range(0, 6), xt::all())), prompt_k);
  EXPECT_EQ(Tensor2(xt::view(child_keys, xt::all(), 6, xt::all())), child_k);
  EXPECT_EQ(Tensor2(xt::view(cache.gather_values(child), xt::all(), 6, xt::all())), child_v);

  // The parent appends: its last block is now its own, so it writes in place.
  const Tensor2 parent_k = rng.normal_matrix(g, d), parent_v = rng.normal_matrix(g, d);
  cache.append(parent, parent_k, parent_v);
  EXPECT_EQ(cache.block_table(parent), parent_table);
  EXPECT_EQ(cache.copy_on_write_count(), 1U) << "an exclusive block is written in place";
  EXPECT_EQ(Tensor2(xt::view(cache.gather_keys(parent), xt::all(), 6, xt::all())), parent_k);
  EXPECT_EQ(Tensor2(xt::view(cache.gather_keys(child), xt::all(), 6, xt::all())), child_k);

  // A grandchild of the child: the first block is now in three tables.
  const SequenceId grandchild = cache.fork(child);
  EXPECT_EQ(cache.ref_count(first), 3U);
  EXPECT_EQ(cache.ref_count(copy), 2U);

  // free: every block loses one reference; the ones that reach 0 go back to the free list.
  cache.free(parent);
  EXPECT_EQ(cache.ref_count(first), 2U);
  EXPECT_EQ(cache.ref_count(last), 0U);
  EXPECT_EQ(cache.free_blocks(), n - 2);
  EXPECT_EQ(cache.free_list().back(), last) << "the block just freed is on top of the stack";
  EXPECT_FALSE(cache.has_sequence(parent));
  cache.free(child);
  EXPECT_EQ(cache.ref_count(first), 1U);
  EXPECT_EQ(cache.ref_count(copy), 1U);
  EXPECT_EQ(cache.free_blocks(), n - 2);
  EXPECT_EQ(cache.gather_keys(grandchild), child_keys) << "the grandchild keeps what it shared";
  cache.free(grandchild);
  EXPECT_EQ(cache.free_blocks(), n) << "the pool is full again";
  for (std::size_t block = 0; block < n; ++block) EXPECT_EQ(cache.ref_count(block), 0U) << "block " << block;
  EXPECT_TRUE(cache.sequences().empty());
}

// When the parent's last block is full, the child's append starts a new block of its own: there is
// nothing to copy.
TEST(Ch05PagedKv, a_child_of_a_sequence_ending_on_a_full_block_takes_a_new_block_without_copying) {
  PagedKvCache cache({.num_blocks = 4, .block_size = 2, .num_kv_heads = 1, .head_dim = 2});
  const SequenceId parent = cache.add_sequence();
  cache.append(parent, Tensor3(xt::ones<float>({1, 4, 2})), Tensor3(xt::ones<float>({1, 4, 2})));
  const SequenceId child = cache.fork(parent);
  cache.append(child, Tensor2(xt::zeros<float>({1, 2})), Tensor2(xt::zeros<float>({1, 2})));
  EXPECT_EQ(cache.copy_on_write_count(), 0U);
  EXPECT_EQ(cache.block_table(child).size(), 3U);
  EXPECT_EQ(cache.ref_count(cache.block_table(child)[2]), 1U);
  EXPECT_EQ(cache.ref_count(cache.block_table(child)[1]), 2U);
  EXPECT_EQ(cache.free_blocks(), 1U);
}

// A seeded random walk of add, append (one token or a prompt), fork and free against a model kept
// here (each sequence's tokens as plain vectors). After every step: the reference count of each
// block equals the number of table entries that point at it, the free list holds exactly the
// blocks of count 0 (once each), and every sequence gathers its own tokens. At the end, freeing
// every sequence returns the whole pool.
TEST(Ch05PagedKv, reference_counts_always_equal_the_tables_pointing_at_each_block) {
  const std::size_t num_blocks = 24, b = 3, g = 2, d = 2;
  PagedKvCache cache({.num_blocks = num_blocks, .block_size = b, .num_kv_heads = g, .head_dim = d});
  std::map<SequenceId, std::vector<float>> model;  // the keys of each sequence, token after token, [g d] each
  Rng rng(2024);
  float next_value = 1.0f;
  for (int step = 0; step < 400; ++step) {
    const double r = rng.uniform();
    std::vector<SequenceId> live = cache.sequences();
    const SequenceId pick = live.empty() ? 0 : live[static_cast<std::size_t>(rng.uniform() * live.size())];
    if (live.empty() || r < 0.1) {
      model[cache.add_sequence()] = {};
    } else if (r < 0.2) {
      const SequenceId c = cache.fork(pick);
      model[c] = model[pick];
    } else if (r < 0.3) {
      cache.free(pick);
      model.erase(pick);
    } else {
      const std::size_t n = r < 0.4 ? 1 + static_cast<std::size_t>(rng.uniform() * 5) : 1;
      Tensor3 k = Tensor3::from_shape({g, n, d});
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t h = 0; h < g; ++h)
          for (std::size_t c = 0; c < d; ++c) k(h, t, c) = next_value++;
      try {
        cache.append(pick, k, k);
        for (std::size_t t = 0; t < n; ++t)
          for (std::size_t h = 0; h < g; ++h)
            for (std::size_t c = 0; c < d; ++c) model[pick].push_back(k(h, t, c));
      } catch (const Error&) {
        // The pool is full: free the longest sequence to make room (a scheduler would preempt it).
        SequenceId longest = pick;
        for (const SequenceId s : live)
          if (cache.length(s) > cache.length(longest)) longest = s;
        cache.free(longest);
        model.erase(longest);
      }
    }
    // Invariants.
    std::vector<std::size_t> pointing(num_blocks, 0);
    for (const SequenceId s : cache.sequences()) {
      ASSERT_EQ(cache.block_table(s).size(), (cache.length(s) + b - 1) / b) << "step " << step;
      for (const std::size_t block : cache.block_table(s)) ++pointing[block];
      const Tensor3 keys = cache.gather_keys(s);
      std::vector<float> got;
      for (std::size_t t = 0; t < cache.length(s); ++t)
        for (std::size_t h = 0; h < g; ++h)
          for (std::size_t c = 0; c < d; ++c) got.push_back(keys(h, t, c));
      ASSERT_EQ(got, model[s]) << "step " << step << ": sequence " << s << " lost or mixed up its tokens";
    }
    std::vector<std::size_t> free_sorted = cache.free_list();
    std::sort(free_sorted.begin(), free_sorted.end());
    std::vector<std::size_t> zero_count;
    for (std::size_t block = 0; block < num_blocks; ++block) {
      ASSERT_EQ(cache.ref_count(block), pointing[block]) << "step " << step << ", block " << block;
      if (pointing[block] == 0) zero_count.push_back(block);
    }
    ASSERT_EQ(free_sorted, zero_count) << "step " << step << ": the free list must hold exactly the unreferenced blocks";
  }
  EXPECT_GT(cache.copy_on_write_count(), 0U) << "the walk should exercise copy-on-write";
  for (const SequenceId s : cache.sequences()) cache.free(s);
  EXPECT_EQ(cache.free_blocks(), num_blocks);
}

// ---------------------------------------------------------------------------------------- bad input

TEST(Ch05PagedKv, rejects_bad_configurations_naming_the_field) {
  const PagedKvConfig good{.num_blocks = 4, .block_size = 2, .num_kv_heads = 1, .head_dim = 2};
  for (const auto& [field, cfg] : {std::pair{"cfg.num_blocks", PagedKvConfig{0, 2, 1, 2}},
                                   std::pair{"cfg.block_size", PagedKvConfig{4, 0, 1, 2}},
                                   std::pair{"cfg.num_kv_heads", PagedKvConfig{4, 2, 0, 2}},
                                   std::pair{"cfg.head_dim", PagedKvConfig{4, 2, 1, 0}}}) {
    EXPECT_TRUE(throws_error_naming([&] { PagedKvCache{cfg}; }, {"PagedKvCache", field}));
  }
  EXPECT_NO_THROW(PagedKvCache{good});
}

// Each refused call names its parameter and leaves every table, length, count, the free list and
// the pool's bits as they were.
TEST(Ch05PagedKv, every_refused_call_names_the_parameter_and_leaves_the_cache_unchanged) {
  const std::size_t b = 4, g = 2, d = 3;
  PagedKvCache cache({.num_blocks = 3, .block_size = b, .num_kv_heads = g, .head_dim = d});
  Rng rng(3);
  const SequenceId a = cache.add_sequence();
  cache.append(a, rng.normal_tensor(g, 6, d), rng.normal_tensor(g, 6, d));  // blocks 0, 1 (2 slots free)
  const SequenceId forked = cache.fork(a);
  const Tensor2 k = rng.normal_matrix(g, d), v = rng.normal_matrix(g, d);
  const Snapshot before(cache);
  const auto unchanged = [&](const char* what) {
    EXPECT_TRUE(Snapshot(cache) == before) << what << " changed the cache although it threw";
  };
  const SequenceId unknown = 99;
  EXPECT_TRUE(throws_error_naming([&] { cache.append(unknown, k, v); }, {"PagedKvCache::append", "seq (99)"}));
  unchanged("append to an unknown sequence");
  EXPECT_TRUE(throws_error_naming([&] { cache.append(a, Tensor2(xt::ones<float>({3UL, d})), v); },
                                  {"PagedKvCache::append", "k_t", "num_kv_heads"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.append(a, k, Tensor2(xt::ones<float>({g, 4UL}))); },
                                  {"PagedKvCache::append", "v_t", "head_dim"}));
  Tensor2 nan = k;
  nan(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { cache.append(a, k, nan); }, {"PagedKvCache::append", "v_t", "non-finite"}));
  EXPECT_TRUE(throws_error_naming(
      [&] { cache.append(a, rng.normal_tensor(g, 2, d), rng.normal_tensor(g, 3, d)); }, {"PagedKvCache::append", "v has 3"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.append(a, rng.normal_tensor(g, 2, 5), rng.normal_tensor(g, 2, 5)); },
                                  {"PagedKvCache::append", "k has shape"}));
  unchanged("append of bad tensors");
  // Capacity: one block is free. A prompt of 7 tokens would need the copy of the shared block plus
  // one more block: refused as a whole, not stored half.
  EXPECT_TRUE(throws_error_naming([&] { cache.append(a, rng.normal_tensor(g, 7, d), rng.normal_tensor(g, 7, d)); },
                                  {"PagedKvCache::append", "no free block", "seq (0)", "num_blocks (3)"}));
  unchanged("a prompt larger than the free blocks");
  cache.append(forked, k, v);  // takes the last free block for the copy of the shared block
  const Snapshot full(cache);
  EXPECT_EQ(cache.free_blocks(), 0U);
  EXPECT_EQ(cache.ref_count(cache.block_table(a)[1]), 1U);
  // a's last block is its own now and has 2 free slots; the 3rd token would need a new block.
  cache.append(a, k, v);
  cache.append(a, k, v);
  const Snapshot no_room(cache);
  EXPECT_TRUE(throws_error_naming([&] { cache.append(a, k, v); }, {"PagedKvCache::append", "no free block"}));
  EXPECT_TRUE(Snapshot(cache) == no_room) << "a refused append for lack of blocks changed the cache";
  // Copy-on-write with no block to copy into.
  const SequenceId c = cache.fork(forked);
  const Snapshot shared(cache);
  EXPECT_TRUE(throws_error_naming([&] { cache.append(c, k, v); }, {"PagedKvCache::append", "no free block", "seq (2)"}));
  EXPECT_TRUE(Snapshot(cache) == shared) << "a refused copy-on-write changed the cache";
  EXPECT_TRUE(throws_error_naming([&] { cache.fork(unknown); }, {"PagedKvCache::fork", "seq (99)"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.free(unknown); }, {"PagedKvCache::free", "seq (99)"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.length(unknown); }, {"PagedKvCache::length", "seq (99)"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.block_table(unknown); }, {"PagedKvCache::block_table", "seq (99)"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.gather_keys(unknown); }, {"PagedKvCache::gather_keys", "seq (99)"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.ref_count(3); }, {"PagedKvCache::ref_count", "block (3)", "out of range"}));
  EXPECT_TRUE(Snapshot(cache) == shared) << "a refused fork, free or query changed the cache";
  // A freed sequence is gone: freeing it twice is refused, and leaves the counts alone.
  cache.free(c);
  const Snapshot after_free(cache);
  EXPECT_TRUE(throws_error_naming([&] { cache.free(c); }, {"PagedKvCache::free", "seq (2)", "freed"}));
  EXPECT_TRUE(Snapshot(cache) == after_free) << "a double free changed the reference counts";
  (void)full;
}

TEST(Ch05PagedKv, decode_attention_rejects_bad_tables_and_queries_naming_the_parameter) {
  const std::size_t b = 2, g = 2, d = 4;
  PagedKvCache cache({.num_blocks = 6, .block_size = b, .num_kv_heads = g, .head_dim = d});
  Rng rng(8);
  const SequenceId s = cache.add_sequence(), other = cache.add_sequence(), empty = cache.add_sequence();
  cache.append(s, rng.normal_tensor(g, 3, d), rng.normal_tensor(g, 3, d));      // blocks 0, 1
  cache.append(other, rng.normal_tensor(g, 2, d), rng.normal_tensor(g, 2, d));  // block 2
  cache.free(other);                                                            // block 2 is free again
  const Tensor2 q = rng.normal_matrix(4, d);
  const std::vector<std::size_t> table = cache.block_table(s);
  const char* fn = "paged_decode_attention";
  EXPECT_NO_THROW(ref::paged_decode_attention(q, cache, table, 3));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(q, cache, std::vector<std::size_t>{0, 6}, 3); },
                                  {fn, "block_table[1] = 6", "out of range", "num_blocks = 6"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(q, cache, std::vector<std::size_t>{0, 2}, 3); },
                                  {fn, "block_table[1] = 2", "free block"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(q, cache, std::vector<std::size_t>{0}, 3); },
                                  {fn, "block_table has 1 entries", "context_len (3)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(q, cache, table, 0); }, {fn, "context_len (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(Tensor2(xt::ones<float>({4, 3})), cache, s); },
                                  {fn, "q has head_dim 3", "expected 4"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(Tensor2(xt::ones<float>({3UL, d})), cache, s); },
                                  {fn, "num_heads (3", "num_kv_heads (2"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(Tensor2(xt::ones<float>({0UL, d})), cache, s); },
                                  {fn, "q has no head"}));
  Tensor2 nan = q;
  nan(2, 1) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(nan, cache, s); }, {fn, "q has a non-finite"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(q, cache, s, -1.0); }, {fn, "scale (-1)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(q, cache, SequenceId{1}); },
                                  {fn, "seq (1)", "not a live sequence"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::paged_decode_attention(q, cache, empty); }, {fn, "seq (2)", "no token"}));
}

// ------------------------------------------------------------------------------------ waste

// A sequence of L tokens holds ceil(L/b) b slots: counted here twice from first principles, as the
// blocks a PagedKvCache takes for L appended tokens and as the first multiple of b reached by
// counting up from L.
TEST(Ch05PagedWaste, a_sequence_of_length_l_wastes_the_unused_slots_of_its_last_block) {
  for (const std::size_t b : {std::size_t{1}, std::size_t{3}, std::size_t{16}}) {
    PagedKvCache cache({.num_blocks = 80, .block_size = b, .num_kv_heads = 1, .head_dim = 1});
    const SequenceId s = cache.add_sequence();
    for (std::size_t length = 1; length <= 70; ++length) {
      cache.append(s, Tensor2{{1.0f}}, Tensor2{{1.0f}});
      std::size_t multiple = length;
      while (multiple % b != 0) ++multiple;
      EXPECT_EQ(analysis::paged_slots(length, b), cache.block_table(s).size() * b) << "L " << length << ", b " << b;
      EXPECT_EQ(analysis::paged_slots(length, b), multiple) << "L " << length << ", b " << b;
      EXPECT_EQ(analysis::last_block_waste(length, b), multiple - length);
      EXPECT_LE(analysis::last_block_waste(length, b), b - 1);
    }
  }
}

// With L mod b uniform on {0, ..., b - 1} (prompts uniform over 32 b values), the last block's waste
// (b - L mod b) mod b is uniform on the same set: mean (b - 1)/2, variance (b^2 - 1)/12. The mean of
// N = 20000 requests is within 5 standard errors, 5 sqrt((b^2 - 1) / (12 N)), of (b - 1)/2.
TEST(Ch05PagedWaste, the_mean_last_block_waste_is_about_half_a_block) {
  for (const std::size_t b : {std::size_t{4}, std::size_t{16}, std::size_t{32}}) {
    const std::size_t n = 20000;
    const auto requests = analysis::sample_requests(
        {.num_requests = n, .prompt = {.min = 1, .max = 32 * b}, .output = {.min = 1, .max = 100}, .seed = 7 + b});
    const analysis::KvWasteReport report = analysis::kv_waste(requests, 32 * b + 100, b);
    const double standard_error = std::sqrt((double(b) * b - 1) / 12.0 / n);
    EXPECT_NEAR(report.mean_last_block_waste(), (b - 1) / 2.0, 5 * standard_error) << "b " << b;
  }
}

// One request, prompt 3, output 4, blocks of 4, max_len 10, step by step: after decode steps 1..4 the
// cache holds 4, 5, 6, 7 tokens, in 4, 8, 8, 8 paged slots; preallocation holds 10 and the oracle 7
// throughout.
TEST(Ch05PagedWaste, one_request_step_by_step) {
  const analysis::KvWasteReport r = analysis::kv_waste({{3, 4}}, 10, 4);
  const double used[] = {4, 5, 6, 7}, paged[] = {4, 8, 8, 8};
  double used_sum = 0, paged_sum = 0;
  for (int j = 0; j < 4; ++j) {
    used_sum += used[j];
    paged_sum += paged[j];
  }
  EXPECT_EQ(r.used_slot_steps, used_sum);
  EXPECT_EQ(r.paged_slot_steps, paged_sum);
  EXPECT_EQ(r.preallocated_slot_steps, 4 * 10.0);
  EXPECT_EQ(r.exact_slot_steps, 4 * 7.0);
  EXPECT_EQ(r.used_slots, 7.0);
  EXPECT_EQ(r.paged_slots, 8.0);
  EXPECT_DOUBLE_EQ(r.preallocated_waste(), 1 - 7.0 / 10);
  EXPECT_DOUBLE_EQ(r.paged_waste(), 1 - 7.0 / 8);
  EXPECT_DOUBLE_EQ(r.exact_waste_over_time(), 1 - used_sum / 28);
  EXPECT_DOUBLE_EQ(r.mean_last_block_waste(), 1.0);
}

// The vLLM paper's figures (existing systems waste 60-80% of the KV cache, vLLM under 4%) under the
// assumptions that reproduce them: requests like ShareGPT's (mean prompt 161, mean output 338 tokens;
// here uniform on [1, 321] and [1, 675]) against a 2048-token limit (OPT's). Preallocation wastes
// 1 - E[L]/2048 with E[L] = 161 + 338 = 499 (76%); paging with b = 16 wastes about
// 7.5 / (499 + 7.5) (1.5%). Tolerances: 5 standard errors of the sample mean of L (its standard
// deviation sqrt((321^2 - 1)/12 + (675^2 - 1)/12) ~ 216, over sqrt(10000)) carried into each fraction.
// Short requests (Alpaca-like: prompts up to 40, outputs up to 120 tokens, E[L] = 81) show the limit
// of the claim: paging then wastes about 7.5 / 88.5 = 8.5%, more than 4%.
TEST(Ch05PagedWaste, the_vllm_paper_figures_follow_from_sharegpt_like_lengths_and_a_2048_token_limit) {
  const std::size_t n = 10000, max_len = 2048, b = 16;
  const auto long_requests =
      analysis::sample_requests({.num_requests = n, .prompt = {.min = 1, .max = 321}, .output = {.min = 1, .max = 675}, .seed = 1});
  const analysis::KvWasteReport r = analysis::kv_waste(long_requests, max_len, b);
  const double mean_length = 161 + 338, se = 5 * std::sqrt((321.0 * 321 - 1) / 12 + (675.0 * 675 - 1) / 12) / std::sqrt(n);
  EXPECT_NEAR(r.mean_length, mean_length, se);
  EXPECT_NEAR(r.preallocated_waste(), 1 - mean_length / max_len, se / max_len);
  EXPECT_GT(r.preallocated_waste(), 0.6);
  EXPECT_LT(r.preallocated_waste(), 0.8);
  const double half_block = (b - 1) / 2.0;
  // d/dL of h / (L + h) is at most h / L^2 in size; the mean waste itself moves by 5 sqrt((b^2-1)/12/n).
  EXPECT_NEAR(r.paged_waste(), half_block / (mean_length + half_block),
              half_block / (mean_length * mean_length) * se + 5 * std::sqrt((b * b - 1) / 12.0 / n) / mean_length);
  EXPECT_LT(r.paged_waste(), 0.04);
  EXPECT_GT(r.preallocated_waste_over_time(), r.preallocated_waste()) << "during generation even more is reserved";
  EXPECT_GT(r.exact_waste_over_time(), 0.2) << "an exact reservation still holds the slots of tokens to come";
  EXPECT_LT(r.paged_waste_over_time(), 0.04);

  const auto short_requests =
      analysis::sample_requests({.num_requests = n, .prompt = {.min = 1, .max = 40}, .output = {.min = 1, .max = 120}, .seed = 2});
  const analysis::KvWasteReport s = analysis::kv_waste(short_requests, max_len, b);
  EXPECT_GT(s.preallocated_waste(), 0.95);
  EXPECT_GT(s.paged_waste(), 0.04) << "with ~81-token requests a 16-token block wastes ~8.5%";
}

// Uniform lengths take each value of [min, max] (both ends included) equally often: each of the 5
// values of [3, 7] appears N/5 times within 5 standard deviations of a binomial count, 5 sqrt(N p (1 - p)).
TEST(Ch05PagedWaste, uniform_lengths_cover_min_to_max_equally) {
  const std::size_t n = 10000;
  const auto requests =
      analysis::sample_requests({.num_requests = n, .prompt = {.min = 3, .max = 7}, .output = {.min = 1, .max = 1}, .seed = 4});
  std::map<std::size_t, std::size_t> counts;
  for (const analysis::Request& r : requests) {
    ++counts[r.prompt_len];
    EXPECT_EQ(r.output_len, 1U);
  }
  ASSERT_EQ(counts.size(), 5U) << "every value of [3, 7] and no other";
  EXPECT_EQ(counts.begin()->first, 3U);
  EXPECT_EQ(counts.rbegin()->first, 7U);
  for (const auto& [value, count] : counts) EXPECT_NEAR(double(count), n / 5.0, 5 * std::sqrt(n * 0.2 * 0.8)) << value;
}

// The log-normal lengths have the median they are given (half the draws below it, within 5 standard
// errors of a proportion, 5 sqrt(1/4 / N)) and stay within [min, max].
TEST(Ch05PagedWaste, log_normal_lengths_have_their_median_and_stay_in_range) {
  const std::size_t n = 10000;
  const analysis::TokenCountDistribution lengths{
      .kind = analysis::LengthDistribution::log_normal, .min = 1, .max = 2000, .median = 200, .sigma = 1.0};
  const auto requests = analysis::sample_requests({.num_requests = n, .prompt = lengths, .output = lengths, .seed = 3});
  std::size_t below = 0;
  for (const analysis::Request& r : requests) {
    ASSERT_GE(r.prompt_len, 1U);
    ASSERT_LE(r.prompt_len, 2000U);
    below += r.prompt_len < 200 ? 1 : 0;
  }
  EXPECT_NEAR(double(below) / n, 0.5, 5 * std::sqrt(0.25 / n));
}

TEST(Ch05PagedWaste, rejects_bad_input_naming_the_parameter) {
  EXPECT_TRUE(throws_error_naming([] { analysis::paged_slots(5, 0); }, {"paged_slots", "block_size (0)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::last_block_waste(5, 0); }, {"last_block_waste", "block_size (0)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::kv_waste({}, 10, 4); }, {"kv_waste", "requests is empty"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::kv_waste({{1, 1}}, 0, 4); }, {"kv_waste", "max_len (0)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::kv_waste({{1, 1}}, 10, 0); }, {"kv_waste", "block_size (0)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::kv_waste({{1, 1}, {8, 5}}, 10, 4); },
                                  {"kv_waste", "requests[1] has length 13", "max_len (10)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::kv_waste({{4, 0}}, 10, 4); }, {"kv_waste", "requests[0] has output_len 0"}));
  // Sizes at the top of size_t: L + b - 1 and prompt + output would wrap around to small numbers.
  constexpr std::size_t top = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(analysis::paged_slots(top - 15, 16), top - 15);  // 2^64 - 16, already whole blocks
  EXPECT_TRUE(throws_error_naming([] { analysis::paged_slots(top, 16); }, {"paged_slots", "length", "size_t"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::kv_waste({{top, 2}}, 10, 4); }, {"kv_waste", "requests[0] has length"}));
  // A log-normal draw clamped to a maximum of 2^64 - 1 (2^64 as a double) returns the maximum.
  const auto huge = analysis::sample_requests(
      {.num_requests = 1,
       .prompt = {.kind = analysis::LengthDistribution::log_normal, .min = 1, .max = top, .median = 1e30, .sigma = 0},
       .output = {.min = 1, .max = 1}});
  EXPECT_EQ(huge[0].prompt_len, top);
  EXPECT_TRUE(throws_error_naming([] { analysis::sample_requests({.num_requests = 0}); },
                                  {"sample_requests", "cfg.num_requests (0)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::sample_requests({.prompt = {.min = 5, .max = 4}}); },
                                  {"sample_requests", "cfg.prompt.min (5)", "cfg.prompt.max (4)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::sample_requests({.output = {.min = 0, .max = 4}}); },
                                  {"sample_requests", "cfg.output.min (0)"}));
  EXPECT_TRUE(throws_error_naming(
      [] { analysis::sample_requests({.prompt = {.kind = analysis::LengthDistribution::log_normal, .max = 9, .median = 0}}); },
      {"sample_requests", "cfg.prompt.median (0)"}));
  EXPECT_TRUE(throws_error_naming(
      [] { analysis::sample_requests({.prompt = {.kind = analysis::LengthDistribution::log_normal, .max = 9, .sigma = -1}}); },
      {"sample_requests", "cfg.prompt.sigma (-1)"}));
}

}  // namespace
}  // namespace tvlab::ch05

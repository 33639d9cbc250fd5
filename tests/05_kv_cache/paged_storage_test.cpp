// Chapter 05, the paged KV cache in bf16, INT8 and FP8 E4M3 storage: the pool holds what a
// contiguous cache of the same format would (the same bits, codes and scales), forks and
// copy-on-write carry codes and scales together, each token costs the bytes of its format; the
// decode step of every backend of the registry equals attention over the dequantized gathered
// cache to float rounding, and differs from the fp32 cache by no more than the format's step
// allows; bad input is refused by name.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/paged_attention.hpp"
#include "tvlab/ref/paged_attention.hpp"

namespace tvlab::kv {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

constexpr PagedKvStorage kStorages[] = {PagedKvStorage::fp32, PagedKvStorage::bf16, PagedKvStorage::int8,
                                        PagedKvStorage::fp8_e4m3};
constexpr PagedKvStorage kNarrowStorages[] = {PagedKvStorage::bf16, PagedKvStorage::int8, PagedKvStorage::fp8_e4m3};

struct StorageCase {
  PagedKvStorage storage;
};
void PrintTo(const StorageCase& c, std::ostream* out) { *out << storage_name(c.storage); }

struct Shape {
  std::size_t heads, kv_heads, d, block_size, length;
};
std::string label_of(const Shape& s, PagedKvStorage storage) {
  return std::string(storage_name(storage)) + ", h " + std::to_string(s.heads) + " g " + std::to_string(s.kv_heads) +
         ", d " + std::to_string(s.d) + ", b " + std::to_string(s.block_size) + ", " + std::to_string(s.length) +
         " tokens";
}
// GQA with few query heads per kv head (the dot-product scores) and with 16 (the micro-kernel),
// head dimensions that are not a whole number of registers, blocks of 4, 5 and 16, one token.
const Shape kShapes[] = {
    {32, 8, 128, 16, 300},
    {32, 2, 40, 5, 203},
    {4, 4, 8, 4, 13},
    {8, 1, 33, 16, 1},
};

// The tokens of a sequence, and a cache in `storage` holding them behind a spacer sequence (so
// that its blocks are not 0, 1, 2, ...). Keys have an outlier so that the softmax is not flat
// (unless `zero_keys`: every key 0).
struct Stored {
  PagedKvCache cache;
  SequenceId seq;
  Tensor2 q;
  Tensor3 k, v;  // the floats appended
};
Stored make_stored(const Shape& s, PagedKvStorage storage, std::uint64_t seed, std::size_t spare_blocks = 2,
                   bool zero_keys = false) {
  Rng rng(seed);
  const std::size_t blocks = (s.length + s.block_size - 1) / s.block_size;
  Stored st{PagedKvCache({.num_blocks = blocks + spare_blocks,
                          .block_size = s.block_size,
                          .num_kv_heads = s.kv_heads,
                          .head_dim = s.d,
                          .storage = storage}),
            0, rng.normal_matrix(s.heads, s.d), rng.normal_tensor(s.kv_heads, s.length, s.d),
            rng.normal_tensor(s.kv_heads, s.length, s.d)};
  st.k(0, s.length / 2, 0) = 6.0f;
  if (zero_keys) st.k.fill(0.0f);
  const SequenceId spacer = st.cache.add_sequence();
  st.cache.append(spacer, rng.normal_matrix(s.kv_heads, s.d), rng.normal_matrix(s.kv_heads, s.d));
  st.seq = st.cache.add_sequence();
  st.cache.append(st.seq, st.k, st.v);
  return st;
}

// Attention of one decode step from its definition, in double: query head i reads kv head
// i / (h/g); s_it = scale q_i . k_t, o_i = sum_t softmax_t(s_i) v_t, lse_i = log sum_t e^{s_it}.
struct Oracle {
  DTensor2 out;
  DTensor1 lse;
};
Oracle oracle(const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t length) {
  const std::size_t h = q.shape()[0], d = q.shape()[1], g = k.shape()[0];
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Oracle o{xt::zeros<double>({h, d}), xt::zeros<double>({h})};
  for (std::size_t i = 0; i < h; ++i) {
    const std::size_t j = i / (h / g);
    std::vector<double> s(length);
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < length; ++t) {
      double dot = 0.0;
      for (std::size_t c = 0; c < d; ++c) dot += double{q(i, c)} * k(j, t, c);
      s[t] = scale * dot;
      m = std::max(m, s[t]);
    }
    double sum = 0.0;
    for (std::size_t t = 0; t < length; ++t) sum += std::exp(s[t] - m);
    for (std::size_t t = 0; t < length; ++t)
      for (std::size_t c = 0; c < d; ++c) o.out(i, c) += std::exp(s[t] - m) / sum * v(j, t, c);
    o.lse(i) = m + std::log(sum);
  }
  return o;
}

// The float rounding of a decode step of length n against the double oracle (as chapter 05's
// suite states it for the fp32 cache): a reduction of max(d, n) terms.
Tolerance rounding_of(const Shape& s) { return {1e-5, reduction_rtol(std::max(s.d, s.length))}; }

// ---------------------------------------------------------------- decode, every backend, every storage

class PagedStorageDecode : public ::testing::TestWithParam<std::tuple<Backend, StorageCase>> {};

// The step reads each element as the pool stores it and dequantizes it: the same numbers as
// gather_keys / gather_values hand out, so attention over those, in double, is the expected result.
TEST_P(PagedStorageDecode, equals_attention_over_the_dequantized_gathered_cache) {
  const auto& [backend, c] = GetParam();
  if (backend.kind == BackendKind::cuda && c.storage != PagedKvStorage::fp32) {
    // The CUDA kernel reads fp32 pools only: it says so before touching the device.
    const Stored st = make_stored(kShapes[2], c.storage, 3);
    EXPECT_TRUE(throws_error_naming(
        [&] { backend.paged_decode(st.q, st.cache, st.cache.block_table(st.seq), st.cache.length(st.seq), {}); },
        {"cache stores", storage_name(c.storage), "CUDA paged kernel"}));
    return;
  }
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  std::uint64_t seed = 4000 + static_cast<std::uint64_t>(c.storage) * 100;
  for (const Shape& s : kShapes) {
    const Stored st = make_stored(s, c.storage, ++seed);
    const Tensor3 k_hat = st.cache.gather_keys(st.seq), v_hat = st.cache.gather_values(st.seq);
    const Oracle expected = oracle(st.q, k_hat, v_hat, s.length);
    const DecodeAttention got = backend.paged_decode(st.q, st.cache, st.cache.block_table(st.seq), s.length, {});
    const std::string what = "paged_decode_attention over " + label_of(s, c.storage);
    EXPECT_TRUE(matches(got.out, expected.out, rounding_of(s),
                        {what + ": out", {"h", "c"}, seed, "",
                         "k^ = s q (int8), s e4m3(q) (fp8) with the slot's scale, bf16 bits << 16; then "
                         "o_i = sum_t softmax_t(scale q_i . k^_t) v^_t over kv head i / (h/g)"}));
    EXPECT_TRUE(matches(got.lse, expected.lse, {1e-5, 1e-6},
                        {what + ": lse", {"h"}, seed, "", "lse_i = m_i + log sum_t exp(s_it - m_i)"}));
  }
}

// What the format costs: the error against attention over the floats appended (an fp32 cache
// holds them exactly) stays within the bound of ref/quantized_kv_attention.hpp, computed here from
// the half steps delta of each element,
//   |o^_c - o_c| <= max_t dV_tc + (1 - e^{-2 eps}) (max_t v^_tc - min_t v^_tc + 2 max_t dV_tc),
//   eps = scale max_t sum_c |q_c| dK_tc,
// plus the step's own float rounding. The half steps: s/2 for INT8 (s the slot's scale),
// s u(q)/2 for E4M3 (u(q) the spacing of E4M3 values at the code's value: 2^{e-3} in [2^e, 2^{e+1}),
// 2^{-9} below 2^{-6}), and 2^{-8} |x| for bf16 (8 significant bits, rounded to nearest).
// Two inputs: random keys (queries of a quarter of the usual size, so that eps stays small), and
// keys all 0, which every format stores exactly: the weights are then exact (eps = 0) and the bound
// is the values' half step alone, tight enough to catch values read with a wrong scale.
TEST_P(PagedStorageDecode, differs_from_the_fp32_cache_within_the_format_step) {
  const auto& [backend, c] = GetParam();
  if (c.storage == PagedKvStorage::fp32) GTEST_SKIP() << "fp32 is the cache the others are compared with";
  if (backend.kind == BackendKind::cuda) GTEST_SKIP() << "the CUDA kernel reads fp32 pools only";
  const Shape s = kShapes[0];
  const std::size_t b = s.block_size, d = s.d;
  for (const bool zero_keys : {false, true}) {
    const std::uint64_t seed = 5000 + static_cast<std::uint64_t>(c.storage);
    const Stored st = make_stored(s, c.storage, seed, 2, zero_keys);
    const std::vector<std::size_t>& table = st.cache.block_table(st.seq);
    const std::string what = label_of(s, c.storage) + (zero_keys ? ", keys 0" : ", random keys");
    // dX(j, t, e): the half step of element e of token t of kv head j, from what the pool holds.
    auto half_step = [&](bool keys, std::size_t j, std::size_t t, std::size_t e) {
      const double x = keys ? st.k(j, t, e) : st.v(j, t, e);
      if (c.storage == PagedKvStorage::bf16) return std::ldexp(std::fabs(x), -8);
      const std::size_t row = (table[t / b] * s.kv_heads + j) * b + t % b;
      const double scale = keys ? st.cache.key_scales()[row] : st.cache.value_scales()[row];
      if (c.storage == PagedKvStorage::int8) return scale / 2;
      const std::uint8_t code = keys ? st.cache.key_codes()[row * d + e] : st.cache.value_codes()[row * d + e];
      const double y = std::fabs(e4m3_bits_to_float(code));
      const double spacing = y < std::ldexp(1.0, -6) ? std::ldexp(1.0, -9) : std::ldexp(1.0, std::ilogb(y) - 3);
      return scale * spacing / 2;
    };
    const Tensor2 q = 0.25f * st.q;
    const Tensor3 v_hat = st.cache.gather_values(st.seq);
    const Oracle exact = oracle(q, st.k, st.v, s.length);
    const DecodeAttention got = backend.paged_decode(q, st.cache, table, s.length, {});
    const Tolerance rounding = rounding_of(s);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    double worst_error = 0.0, worst_bound = 0.0;
    for (std::size_t i = 0; i < s.heads; ++i) {
      const std::size_t j = i / (s.heads / s.kv_heads);
      double eps = 0.0;
      for (std::size_t t = 0; t < s.length; ++t) {
        double shift = 0.0;
        for (std::size_t e = 0; e < d; ++e) shift += std::fabs(double{q(i, e)}) * half_step(true, j, t, e);
        eps = std::max(eps, scale * shift);
      }
      for (std::size_t e = 0; e < d; ++e) {
        double dv = 0.0, hi = -HUGE_VAL, lo = HUGE_VAL;
        for (std::size_t t = 0; t < s.length; ++t) {
          dv = std::max(dv, half_step(false, j, t, e));
          hi = std::max(hi, double{v_hat(j, t, e)});
          lo = std::min(lo, double{v_hat(j, t, e)});
        }
        const double bound = dv + (1 - std::exp(-2 * eps)) * (hi - lo + 2 * dv);
        const double error = std::fabs(double{got.out(i, e)} - exact.out(i, e));
        EXPECT_LE(error, bound + rounding.atol + rounding.rtol * std::fabs(exact.out(i, e)))
            << what << " at (head " << i << ", c " << e << "), seed " << seed;
        worst_error = std::max(worst_error, error);
        worst_bound = std::max(worst_bound, bound);
      }
    }
    ::testing::Test::RecordProperty(what + ": max error", std::to_string(worst_error));
    ::testing::Test::RecordProperty(what + ": max bound", std::to_string(worst_bound));
    EXPECT_GT(worst_error, rounding.atol) << what << ": the narrow format should change the output";
  }
}

// Beam search's pattern in a narrow cache: two forks of a prompt write their own tokens (the shared
// last block copied, codes and scales together, on the first write); each reads its own table.
TEST_P(PagedStorageDecode, forks_read_their_shared_and_copied_blocks) {
  const auto& [backend, c] = GetParam();
  if (backend.kind == BackendKind::cuda && c.storage != PagedKvStorage::fp32)
    GTEST_SKIP() << "the CUDA kernel reads fp32 pools only";
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Shape s{8, 2, 16, 8, 29};
  Stored st = make_stored(s, c.storage, 77, 6);
  Rng rng(78);
  const SequenceId first = st.cache.fork(st.seq), second = st.cache.fork(st.seq);
  for (int token = 0; token < 5; ++token) {
    st.cache.append(first, rng.normal_matrix(s.kv_heads, s.d), rng.normal_matrix(s.kv_heads, s.d));
    st.cache.append(second, rng.normal_matrix(s.kv_heads, s.d), rng.normal_matrix(s.kv_heads, s.d));
  }
  ASSERT_EQ(st.cache.copy_on_write_count(), 2u) << "each fork copied the shared last block";
  for (const SequenceId seq : {st.seq, first, second}) {
    const std::size_t n = st.cache.length(seq);
    const Oracle expected = oracle(st.q, st.cache.gather_keys(seq), st.cache.gather_values(seq), n);
    const DecodeAttention got = backend.paged_decode(st.q, st.cache, st.cache.block_table(seq), n, {});
    EXPECT_TRUE(matches(got.out, expected.out, rounding_of({s.heads, s.kv_heads, s.d, s.block_size, n}),
                        {label_of(s, c.storage) + ", sequence " + std::to_string(seq) + " of a prompt and two forks",
                         {"h", "c"}, 77, "", "each fork reads the prompt's shared blocks and its own copy"}));
  }
}

std::vector<StorageCase> storage_cases() {
  std::vector<StorageCase> out;
  for (const PagedKvStorage storage : kStorages) out.push_back({storage});
  return out;
}
INSTANTIATE_TEST_SUITE_P(Ch05, PagedStorageDecode,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::paged_decode)),
                                            ::testing::ValuesIn(storage_cases())),
                         tvlab::testing::ImplCaseName());

// The optimized step with splits that begin and end inside a page: each request of the kernel is
// dequantized from the slot it starts at.
TEST(PagedStorageSplits, every_number_of_splits_equals_the_reference) {
  const Shape s{16, 2, 24, 5, 97};
  for (const PagedKvStorage storage : kNarrowStorages) {
    const Stored st = make_stored(s, storage, 6000 + static_cast<std::uint64_t>(storage));
    const std::vector<std::size_t>& table = st.cache.block_table(st.seq);
    const auto expected = ref::paged_decode_attention_with_lse(st.q, st.cache, table, s.length);
    for (const std::size_t splits : {1, 3, 7, 97}) {
      const auto got = opt::paged_decode_attention_split_k(st.q, st.cache, table, s.length, std::nullopt, splits);
      EXPECT_TRUE(matches(got.out, xt::eval(xt::cast<double>(expected.out)), rounding_of(s),
                          {label_of(s, storage) + ", splits " + std::to_string(splits), {"h", "c"}, 6000, "",
                           "a split starting at slot t mod b reads that slot's code and scale"}));
    }
  }
}

// ------------------------------------------------------------------------------ the cache itself

// Element (j, t, e) of a pool of num_kv_heads heads, for the token t of a table: its index.
std::size_t pool_index(const PagedKvCache& cache, const std::vector<std::size_t>& table, std::size_t j, std::size_t t,
                       std::size_t e) {
  const std::size_t b = cache.block_size();
  return ((table[t / b] * cache.num_kv_heads() + j) * b + t % b) * cache.head_dim() + e;
}

// A token's keys are stored as a contiguous cache of the same format stores them: bf16 rounded to
// nearest even, INT8 and E4M3 with kv_quant's per-token quantizer (one scale per token and head),
// bit for bit; gather_keys hands out their values.
TEST(PagedStorage, holds_the_bits_codes_and_scales_of_the_contiguous_format) {
  const Shape s{4, 2, 24, 4, 11};
  for (const PagedKvStorage storage : kNarrowStorages) {
    const Stored st = make_stored(s, storage, 7000);
    const std::vector<std::size_t>& table = st.cache.block_table(st.seq);
    const Tensor3 k_hat = st.cache.gather_keys(st.seq);
    if (storage == PagedKvStorage::bf16) {
      for (std::size_t j = 0; j < s.kv_heads; ++j)
        for (std::size_t t = 0; t < s.length; ++t)
          for (std::size_t e = 0; e < s.d; ++e) {
            ASSERT_EQ(st.cache.key_bits()[pool_index(st.cache, table, j, t, e)], float_to_bf16_bits(st.k(j, t, e)))
                << "(j " << j << ", t " << t << ", e " << e << ")";
            ASSERT_EQ(k_hat(j, t, e), round_to_bf16(st.k(j, t, e)));
          }
      continue;
    }
    const KvQuantSpec spec =
        storage == PagedKvStorage::int8 ? int8_per_token(s.d) : fp8_e4m3_per_token(s.d);
    const QuantizedKv contiguous = quantize_kv(st.k, spec);
    const Tensor3 contiguous_hat = dequantize_kv(contiguous);
    for (std::size_t j = 0; j < s.kv_heads; ++j)
      for (std::size_t t = 0; t < s.length; ++t) {
        const std::size_t row = pool_index(st.cache, table, j, t, 0) / s.d;
        ASSERT_EQ(st.cache.key_scales()[row], contiguous.scales[contiguous.group_index(j, t, 0)])
            << storage_name(storage) << ": scale of (j " << j << ", t " << t << ")";
        for (std::size_t e = 0; e < s.d; ++e) {
          ASSERT_EQ(st.cache.key_codes()[row * s.d + e], contiguous.codes[(j * s.length + t) * s.d + e])
              << storage_name(storage) << ": code of (j " << j << ", t " << t << ", e " << e << ")";
          ASSERT_EQ(k_hat(j, t, e), contiguous_hat(j, t, e));
        }
      }
  }
}

// Fork shares blocks; the first write to a shared, partly filled block copies it (codes and scales
// alike) and leaves the original as it was; freeing the parent leaves the child's tokens intact.
TEST(PagedStorage, fork_copy_on_write_and_free_keep_codes_and_scales) {
  const Shape s{4, 2, 8, 4, 10};  // 10 tokens: the last block is half full
  for (const PagedKvStorage storage : kStorages) {
    Stored st = make_stored(s, storage, 7100);
    const Tensor3 parent_k = st.cache.gather_keys(st.seq), parent_v = st.cache.gather_values(st.seq);
    const SequenceId child = st.cache.fork(st.seq);
    Rng rng(7101);
    const Tensor2 k_new = rng.normal_matrix(s.kv_heads, s.d, 0.0, 3.0), v_new = rng.normal_matrix(s.kv_heads, s.d);
    st.cache.append(child, k_new, v_new);
    ASSERT_EQ(st.cache.copy_on_write_count(), 1u) << storage_name(storage);
    EXPECT_NE(st.cache.block_table(child).back(), st.cache.block_table(st.seq).back()) << storage_name(storage);
    // The parent reads what it held; the child reads the same first 10 tokens from its copy.
    EXPECT_TRUE(xt::all(xt::equal(st.cache.gather_keys(st.seq), parent_k))) << storage_name(storage);
    EXPECT_TRUE(xt::all(xt::equal(st.cache.gather_values(st.seq), parent_v))) << storage_name(storage);
    const Tensor3 child_k = st.cache.gather_keys(child), child_v = st.cache.gather_values(child);
    EXPECT_TRUE(xt::all(xt::equal(xt::view(child_k, xt::all(), xt::range(0, 10), xt::all()), parent_k)))
        << storage_name(storage) << ": the copied block's codes or scales differ from the original's";
    EXPECT_TRUE(xt::all(xt::equal(xt::view(child_v, xt::all(), xt::range(0, 10), xt::all()), parent_v))) << storage_name(storage);
    // The new token, as the pool's format holds it: within half a step of what was appended.
    for (std::size_t j = 0; j < s.kv_heads; ++j)
      for (std::size_t e = 0; e < s.d; ++e) {
        const double x = k_new(j, e), x_hat = child_k(j, 10, e);
        const double absmax = xt::amax(xt::abs(xt::view(k_new, j)))();
        const double allowed = storage == PagedKvStorage::fp32   ? 0.0
                               : storage == PagedKvStorage::bf16 ? std::ldexp(std::fabs(x), -8)
                               : storage == PagedKvStorage::int8 ? absmax / 127 / 2 * (1 + 1e-6)
                                                                 : (std::ldexp(std::fabs(x), -4) + absmax / 448 * 0x1p-10) * (1 + 1e-6);
        EXPECT_LE(std::fabs(x - x_hat), allowed) << storage_name(storage) << " (j " << j << ", e " << e << ")";
      }
    st.cache.free(st.seq);
    EXPECT_TRUE(xt::all(xt::equal(st.cache.gather_keys(child), child_k))) << storage_name(storage);
    EXPECT_TRUE(xt::all(xt::equal(st.cache.gather_values(child), child_v))) << storage_name(storage);
  }
}

// A slot never written reads as NaN in every storage, so that a kernel reading past a sequence's
// length shows it.
TEST(PagedStorage, unwritten_slots_read_as_nan) {
  for (const PagedKvStorage storage : kStorages) {
    const PagedKvCache cache({.num_blocks = 2, .block_size = 4, .num_kv_heads = 1, .head_dim = 3, .storage = storage});
    EXPECT_TRUE(std::isnan(cache.key_at(1, 0, 3, 2))) << storage_name(storage);
    EXPECT_TRUE(std::isnan(cache.value_at(0, 0, 0, 0))) << storage_name(storage);
  }
}

// Keys and values together: 2 g d elements of 4, 2 or 1 bytes, and for INT8 and FP8 one float scale
// per token and kv head for each (2 g of them): for g = 8, d = 128, 8192, 4096 and 2112 bytes.
// The pool's own sizes agree.
TEST(PagedStorage, bytes_per_token_are_those_of_the_format) {
  const std::size_t g = 8, d = 128, b = 16, blocks = 3;
  const std::size_t expected[] = {2 * g * d * 4, 2 * g * d * 2, 2 * g * (d + 4), 2 * g * (d + 4)};
  EXPECT_EQ(expected[2], 2112u);
  for (std::size_t i = 0; i < 4; ++i) {
    const PagedKvStorage storage = kStorages[i];
    const PagedKvCache cache({.num_blocks = blocks, .block_size = b, .num_kv_heads = g, .head_dim = d, .storage = storage});
    EXPECT_EQ(cache.bytes_per_token(), expected[i]) << storage_name(storage);
    EXPECT_EQ(paged_kv_bytes_per_token(storage, g, d), expected[i]) << storage_name(storage);
    std::size_t pool_bytes = 0;  // keys and values, every slot
    switch (storage) {
      case PagedKvStorage::fp32: pool_bytes = 4 * (cache.key_blocks().size() + cache.value_blocks().size()); break;
      case PagedKvStorage::bf16: pool_bytes = 2 * (cache.key_bits().size() + cache.value_bits().size()); break;
      default:
        pool_bytes = cache.key_codes().size() + cache.value_codes().size() +
                     4 * (cache.key_scales().size() + cache.value_scales().size());
    }
    EXPECT_EQ(pool_bytes, expected[i] * blocks * b) << storage_name(storage);
  }
  // The contiguous quantized cache's count of the same format, per tensor.
  EXPECT_EQ(2 * kv_bytes_per_token(int8_per_token(d), g, d), static_cast<double>(expected[2]));
  EXPECT_EQ(2 * kv_bytes_per_token(fp8_e4m3_per_token(d), g, d), static_cast<double>(expected[3]));
}

TEST(PagedStorage, bad_input_is_an_error_naming_the_parameter) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const PagedKvStorage storage : kNarrowStorages) {
    PagedKvCache cache({.num_blocks = 4, .block_size = 4, .num_kv_heads = 2, .head_dim = 8, .storage = storage});
    const SequenceId seq = cache.add_sequence();
    Rng rng(8000);
    cache.append(seq, rng.normal_tensor(2, 5, 8), rng.normal_tensor(2, 5, 8));
    const Tensor3 before = cache.gather_keys(seq);
    Tensor3 k_nan = rng.normal_tensor(2, 3, 8);
    k_nan(1, 2, 7) = static_cast<float>(nan);
    EXPECT_TRUE(throws_error_naming([&] { cache.append(seq, k_nan, rng.normal_tensor(2, 3, 8)); }, {"k", "non-finite"}))
        << storage_name(storage);
    Tensor2 v_inf = rng.normal_matrix(2, 8);
    v_inf(0, 0) = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(throws_error_naming([&] { cache.append(seq, rng.normal_matrix(2, 8), v_inf); }, {"v_t", "non-finite"}))
        << storage_name(storage);
    // Refused appends leave the cache as it was.
    EXPECT_EQ(cache.length(seq), 5u);
    EXPECT_TRUE(xt::all(xt::equal(cache.gather_keys(seq), before))) << storage_name(storage);
    // The pools of another storage are not there to read.
    EXPECT_TRUE(throws_error_naming([&] { (void)cache.key_blocks(); }, {"key_blocks", storage_name(storage), "fp32"}));
    EXPECT_TRUE(throws_error_naming([&] { (void)cache.value_blocks(); }, {"value_blocks", storage_name(storage)}));
    if (storage == PagedKvStorage::bf16)
      EXPECT_TRUE(throws_error_naming([&] { (void)cache.key_codes(); }, {"key_codes", "bf16", "int8 or fp8_e4m3"}));
    else
      EXPECT_TRUE(throws_error_naming([&] { (void)cache.value_bits(); }, {"value_bits", storage_name(storage), "bf16"}));
  }
  // bf16 has float's range but not its largest values: they would round to infinity.
  PagedKvCache bf16({.num_blocks = 2, .block_size = 4, .num_kv_heads = 1, .head_dim = 2, .storage = PagedKvStorage::bf16});
  const SequenceId seq = bf16.add_sequence();
  Tensor2 huge = {{std::numeric_limits<float>::max(), 1.0f}};
  EXPECT_TRUE(throws_error_naming([&] { bf16.append(seq, huge, huge); }, {"k_t", "rounds to infinity in bf16"}));
  EXPECT_EQ(bf16.length(seq), 0u);
  // INT8 stores it with a scale s = max|x| / 127 rounded to float, whose s 127 (the value read
  // back) lands beyond float's range: refused too, by name. FP8's s 448 rounds back to float's
  // largest value. 1e38 is stored by both.
  for (const PagedKvStorage storage : {PagedKvStorage::int8, PagedKvStorage::fp8_e4m3}) {
    PagedKvCache wide({.num_blocks = 2, .block_size = 4, .num_kv_heads = 1, .head_dim = 2, .storage = storage});
    const SequenceId s = wide.add_sequence();
    if (storage == PagedKvStorage::int8) {
      EXPECT_TRUE(throws_error_naming([&] { wide.append(s, huge, huge); }, {"k_t", "int8", "overflows"}));
      EXPECT_EQ(wide.length(s), 0u);
    } else {
      wide.append(s, huge, huge);
      EXPECT_EQ(wide.gather_keys(s)(0, 0, 0), std::numeric_limits<float>::max());
    }
    const Tensor2 large = {{1e38f, -1.0f}};
    wide.append(s, large, large);
    EXPECT_NEAR(wide.gather_keys(s)(0, wide.length(s) - 1, 0), 1e38, 1e38 * 1e-6) << storage_name(storage);
  }
  // A fp32 cache has no codes; a storage outside the enum is refused.
  const PagedKvCache fp32({.num_blocks = 1, .block_size = 1, .num_kv_heads = 1, .head_dim = 1});
  EXPECT_TRUE(throws_error_naming([&] { (void)fp32.key_scales(); }, {"key_scales", "fp32", "int8 or fp8_e4m3"}));
  EXPECT_TRUE(throws_error_naming(
      [] {
        PagedKvCache bad({.num_blocks = 1, .block_size = 1, .num_kv_heads = 1, .head_dim = 1,
                          .storage = static_cast<PagedKvStorage>(9)});
      },
      {"cfg.storage"}));
  EXPECT_TRUE(throws_error_naming([] { paged_kv_bytes_per_token(static_cast<PagedKvStorage>(-1), 8, 128); },
                                  {"storage (-1)", "fp8_e4m3"}));
}

}  // namespace
}  // namespace tvlab::kv

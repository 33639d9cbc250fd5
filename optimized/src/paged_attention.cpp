#include "tvlab/opt/paged_attention.hpp"

#include <omp.h>

#include <algorithm>

#include "tvlab/core/error.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/ref/paged_attention.hpp"

#include "detail/decode_checks.hpp"
#include "detail/kv_dequant_rows.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

// How many pages (blocks of the cache) ahead of the one being read the kernel prefetches. A page
// of b = 16 positions is only 8 KiB (d = 128), and consecutive pages lie anywhere in the pool: the
// hardware prefetcher, which follows a stream of addresses, restarts on every page and keeps too
// few lines in flight. Fetching the whole page 3 ahead (into L2: the prefetch must not evict the
// page being read) brought the paged step at 32K positions from 2.3x to 1.4-1.8x the time of the
// contiguous one (2 threads of an AMD EPYC with AVX-512, runs varying by 20%); 1 ahead gained
// little, and 4 to 8 no more than 3 (measured again on split_k_decode's requests, which prefetch
// across the kernel's blocks too: 18.8-20.4 ms with, 19.6-25.6 ms without, contiguous 11.2 ms).
// Longer pages are the real cure: 256 positions per page
// (128 KiB runs) read as fast as the contiguous cache.
constexpr std::size_t kPrefetchPagesAhead = 3;
constexpr int kPrefetchLocality = 2;  // __builtin_prefetch's: 3 = L1, 2 = L2

// Where the rows of one pool (keys or values) of a paged cache lie, as split_k_decode requests
// them: the pool [num_blocks, g, b, dim] seen through the block table, position t of kv head kv
// being row ((T[t / b] g + kv) b + t mod b), dim elements. With `piece` = b the kernel never requests
// positions of two pages at once, so a request is `count` consecutive rows of one page.
struct PageMap {
  std::span<const std::size_t> table;
  std::size_t kv_heads, block_size, dim;
  std::size_t length;  // positions the step attends to: no page past them is prefetched

  std::size_t row(std::size_t kv, std::size_t t) const {
    return (table[t / block_size] * kv_heads + kv) * block_size + t % block_size;
  }

  // The page kPrefetchPagesAhead after the one holding `first` lies elsewhere in the pool: its
  // lines (rows of `bytes_per_row` bytes from `pool`) are requested now, so that they arrive while
  // the pages before it compute.
  void prefetch_ahead(const void* pool, std::size_t bytes_per_row, std::size_t kv, std::size_t first) const {
    const std::size_t ahead = (first / block_size + kPrefetchPagesAhead) * block_size;
    if (ahead >= length) return;
    const char* lines = static_cast<const char*>(pool) + row(kv, ahead) * bytes_per_row;
    const std::size_t bytes = std::min(block_size, length - ahead) * bytes_per_row;
    for (std::size_t byte = 0; byte < bytes; byte += 64) __builtin_prefetch(lines + byte, 0, kPrefetchLocality);
  }
};

// The float pool: a request is read in place, or (width > dim) copied into `buffer` [count, width],
// whose padding the kernel keeps at 0.
struct PagedRows {
  const float* pool;
  PageMap map;

  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    map.prefetch_ahead(pool, map.dim * sizeof(float), kv, first);
    const float* start = pool + map.row(kv, first) * map.dim;
    if (width == map.dim) return {start, map.dim};
    for (std::size_t c = 0; c < count; ++c) std::copy_n(start + c * map.dim, map.dim, buffer + c * width);
    return {buffer, width};
  }
  bool needs_buffer(std::size_t width) const { return width != map.dim; }
};

// The bf16 pool: a request's rows widened to float in the per-thread buffer (at most b rows, 8 KiB
// at b = 16 and d = 128, which stays in L1 until the scores or P V read it).
struct PagedBf16Rows {
  const std::uint16_t* pool;
  PageMap map;

  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    map.prefetch_ahead(pool, map.dim * sizeof(std::uint16_t), kv, first);
    const std::uint16_t* start = pool + map.row(kv, first) * map.dim;
    for (std::size_t c = 0; c < count; ++c) detail::widen_bf16_row(start + c * map.dim, map.dim, buffer + c * width);
    return {buffer, width};
  }
  bool needs_buffer(std::size_t) const { return true; }
};

// An INT8 or E4M3 pool: each row of a request dequantized into the buffer with its slot's scale,
// x^ = s q or x^ = s e4m3(q) (`Dequantize`, from detail/kv_dequant_rows.hpp). The page's scales
// (b floats, one line at b = 16) are fetched ahead with its codes.
template <void (*Dequantize)(const std::uint8_t*, std::size_t, float, float*)>
struct PagedCodeRows {
  const std::uint8_t* codes;
  const float* scales;  // one per row
  PageMap map;

  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    map.prefetch_ahead(codes, map.dim, kv, first);
    map.prefetch_ahead(scales, sizeof(float), kv, first);
    const std::size_t row = map.row(kv, first);
    for (std::size_t c = 0; c < count; ++c)
      Dequantize(codes + (row + c) * map.dim, map.dim, scales[row + c], buffer + c * width);
    return {buffer, width};
  }
  bool needs_buffer(std::size_t) const { return true; }
};
using PagedInt8Rows = PagedCodeRows<detail::dequantize_int8_row>;
using PagedE4m3Rows = PagedCodeRows<detail::dequantize_e4m3_row>;

}  // namespace

GqaDecodeOutput paged_decode_attention_split_k(const Tensor2& q, const PagedKvCache& cache,
                                               std::span<const std::size_t> block_table, std::size_t context_len,
                                               std::optional<double> scale, std::size_t splits) {
  constexpr const char* kFunction = "paged_decode_attention";
  const double scale_value = ref::validate_paged_decode(kFunction, q, cache, block_table, context_len, scale);
  const std::size_t heads = q.shape()[0], kv_heads = cache.num_kv_heads(), group = heads / kv_heads;
  const std::size_t d = cache.head_dim(), b = cache.block_size(), n = context_len;
  const ref::GqaDecodeDims dims{heads, kv_heads, group, block_table.size() * b, n, d, d, scale_value};
  // piece = b: every request to the cache lies in one page (a block of 512 positions is 32 pages
  // of 16, or 33 when the split begins inside a page).
  const detail::SplitDecodeShape shape = detail::split_decode_shape(kFunction, "context_len", dims, splits, b);
  const PageMap map{block_table, kv_heads, b, d, n};
  GqaDecodeOutput result{Tensor2::from_shape({heads, d}), Tensor1::from_shape({heads})};
  float* out = result.out.data();
  float* lse = result.lse.data();
  // The same kernel for every storage; only the row source, which turns a request into floats, differs.
  switch (cache.storage()) {
    case PagedKvStorage::fp32:
      detail::split_k_decode(q.data(), shape, PagedRows{cache.key_blocks().data(), map},
                             PagedRows{cache.value_blocks().data(), map}, out, lse);
      break;
    case PagedKvStorage::bf16:
      detail::split_k_decode(q.data(), shape, PagedBf16Rows{cache.key_bits().data(), map},
                             PagedBf16Rows{cache.value_bits().data(), map}, out, lse);
      break;
    case PagedKvStorage::int8:
      detail::split_k_decode(q.data(), shape, PagedInt8Rows{cache.key_codes().data(), cache.key_scales().data(), map},
                             PagedInt8Rows{cache.value_codes().data(), cache.value_scales().data(), map}, out, lse);
      break;
    case PagedKvStorage::fp8_e4m3:
      detail::split_k_decode(q.data(), shape, PagedE4m3Rows{cache.key_codes().data(), cache.key_scales().data(), map},
                             PagedE4m3Rows{cache.value_codes().data(), cache.value_scales().data(), map}, out, lse);
      break;
  }
  ref::require_finite_decode_output(kFunction, result);
  return result;
}

GqaDecodeOutput paged_decode_attention(const Tensor2& q, const PagedKvCache& cache,
                                       std::span<const std::size_t> block_table, std::size_t context_len,
                                       std::optional<double> scale) {
  return paged_decode_attention_split_k(q, cache, block_table, context_len, scale, 0);
}

}  // namespace tvlab::opt

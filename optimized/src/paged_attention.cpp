#include "tvlab/opt/paged_attention.hpp"

#include <omp.h>

#include <algorithm>

#include "tvlab/core/error.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/ref/paged_attention.hpp"

#include "detail/code_kernels.hpp"
#include "detail/decode_checks.hpp"
#include "detail/kv_dequant_rows.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

// The paged step walks work items over all g kv heads through blocks of positions, taking the
// heads in turn (see paged_decode_attention_split_k). The rows a head reads next lie one block on,
// after every head's pages of this block: the block's bytes of the whole cache later. That is
// what the row sources prefetch (PageMap::ahead), rather than detail::kPrefetchDistance, the
// contiguous step's, whose head reads its next rows at once. A block of about 256 KiB of cache
// (all g heads, keys and values) keeps the rows fetched ahead in the L2 cache until they are read
// and amortises the online softmax's step per block. Measured at 32K positions, g = 8, d = 128,
// 2 threads, a shuffled table, the median of 5 runs: fp32 pages took 9.45 / 10.1 / 10.3 ms with
// blocks of 32 / 64 / 128 positions (256 / 512 / 1024 KiB), bf16 pages 6.73 / 6.28 / 6.68 ms
// (128 / 256 / 512 KiB), INT8 pages 5.90 / 5.48 / 5.16 ms (66 / 132 / 264 KiB); with no prefetch
// the fp32 step took twice as long.
constexpr std::size_t kPagedBlockBytes = std::size_t{256} << 10;

// Positions per block for a cache of `bytes_per_position` (all heads, keys and values): about
// kPagedBlockBytes, a whole number of SIMD widths.
std::size_t paged_block(std::size_t bytes_per_position) {
  const std::size_t positions = kPagedBlockBytes / bytes_per_position / detail::kLanes * detail::kLanes;
  return std::max(positions, detail::kLanes);
}

// Where the rows of one pool (keys or values) of a paged cache lie, as split_k_decode requests
// them: the pool [num_blocks, g, b, dim] seen through the block table, position t of kv head kv
// being row ((T[t / b] g + kv) b + t mod b), dim elements. With `piece` = b the kernel never requests
// positions of two pages at once, so a request is `count` consecutive rows of one page.
struct PageMap {
  std::span<const std::size_t> table;
  std::size_t kv_heads, block_size, dim;
  std::size_t length;  // positions the step attends to: no row past them is prefetched
  std::size_t ahead;   // how far ahead (positions) the sources prefetch: one block of the walk

  std::size_t row(std::size_t kv, std::size_t t) const {
    return (table[t / block_size] * kv_heads + kv) * block_size + t % block_size;
  }

  // Asks for row t of head kv of a pool of `bytes_per_row`-byte rows from `pool`, if t is attended
  // (a software prefetch per 64-byte line). The narrow pools' sources ask for the row `ahead`
  // positions after each row they convert, as the float kernel does for the float pool
  // (RowBlock::ahead): a page of b = 16 positions is a short run anywhere in the
  // pool, where the hardware prefetcher, following a stream of addresses, restarts every time.
  void prefetch_row(const void* pool, std::size_t bytes_per_row, std::size_t kv, std::size_t t) const {
    if (t >= length) return;
    const char* bytes = static_cast<const char*>(pool) + row(kv, t) * bytes_per_row;
    for (std::size_t byte = 0; byte < bytes_per_row; byte += 64) detail::prefetch_line(bytes + byte);
  }
};

// The float pool: a request is read in place, or (width > dim) copied into `buffer` [count, width],
// whose padding the kernel keeps at 0.
struct PagedRows {
  const float* pool;
  PageMap map;

  // The rows `ahead` positions later lie in another page: the kernel prefetches them
  // from `ahead` when they too lie in one page (always, when b divides the distance) and are
  // attended.
  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    const float* start = pool + map.row(kv, first) * map.dim;
    if (width != map.dim) {
      for (std::size_t c = 0; c < count; ++c) std::copy_n(start + c * map.dim, map.dim, buffer + c * width);
      return {buffer, width};
    }
    const std::size_t later = first + map.ahead;
    const bool one_page = later / map.block_size == (later + count - 1) / map.block_size;
    return {start, map.dim, later + count <= map.length && one_page ? pool + map.row(kv, later) * map.dim : nullptr};
  }
  bool needs_buffer(std::size_t width) const { return width != map.dim; }
};

// The bf16 pool: a request's rows widened to float in the per-thread buffer (at most b rows, 8 KiB
// at b = 16 and d = 128, which stays in L1 until the scores or P V read it).
struct PagedBf16Rows {
  const std::uint16_t* pool;
  PageMap map;

  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    const std::uint16_t* start = pool + map.row(kv, first) * map.dim;
    for (std::size_t c = 0; c < count; ++c) {
      map.prefetch_row(pool, map.dim * sizeof(std::uint16_t), kv, first + c + map.ahead);
      detail::widen_bf16_row(start + c * map.dim, map.dim, buffer + c * width);
    }
    return {buffer, width};
  }
  bool needs_buffer(std::size_t) const { return true; }
};

// An INT8 or E4M3 pool: each row of a request dequantized into the buffer with its slot's scale,
// x^ = s q or x^ = s e4m3(q) (`Dequantize`, from detail/kv_dequant_rows.hpp). The scales (one
// float per row) are fetched ahead with the codes.
template <void (*Dequantize)(const std::uint8_t*, std::size_t, float, float*)>
struct PagedCodeRows {
  const std::uint8_t* codes;
  const float* scales;  // one per row
  PageMap map;

  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    const std::size_t row = map.row(kv, first);
    for (std::size_t c = 0; c < count; ++c) {
      map.prefetch_row(codes, map.dim, kv, first + c + map.ahead);
      map.prefetch_row(scales, sizeof(float), kv, first + c + map.ahead);
      Dequantize(codes + (row + c) * map.dim, map.dim, scales[row + c], buffer + c * width);
    }
    return {buffer, width};
  }
  bool needs_buffer(std::size_t) const { return true; }
};
using PagedInt8Rows = PagedCodeRows<detail::dequantize_int8_row>;
using PagedE4m3Rows = PagedCodeRows<detail::dequantize_e4m3_row>;

// A bf16 pool read in place (a detail::CodeSource): a request's rows are `count` consecutive rows
// of 16-bit values in one page, widened in registers by detail::Bf16Codes (no scale), the rows `ahead`
// positions ahead prefetched as PagedRows's floats are. For a head_dim of whole registers;
// otherwise PagedBf16Rows.
struct PagedBf16InPlace {
  using Codes = detail::Bf16Codes;
  const std::uint16_t* pool;
  PageMap map;

  bool needs_buffer(std::size_t) const { return false; }
  detail::CodeBlock code_rows(std::size_t kv, std::size_t first, std::size_t count) const {
    const std::size_t later = first + map.ahead, row_bytes = map.dim * sizeof(std::uint16_t);
    const bool one_page = later / map.block_size == (later + count - 1) / map.block_size;
    const auto bytes_of = [&](std::size_t t) { return reinterpret_cast<const std::uint8_t*>(pool + map.row(kv, t) * map.dim); };
    // The page ahead is looked up in the table only when it is attended.
    return {bytes_of(first), row_bytes, nullptr, later + count <= map.length && one_page ? bytes_of(later) : nullptr};
  }
};

// An INT8 or E4M3 pool read in place (a detail::CodeSource): a request's rows are `count`
// consecutive rows of codes in one page, each with its scale, which the kernels of
// detail/code_kernels.hpp turn into floats in registers (\f$ q \cdot \hat k_t = s_t\,(q \cdot c_t) \f$,
// \f$ p_t \hat v_t = (p_t s_t)\, c_t \f$) with no buffer; the codes `ahead` positions ahead are
// prefetched when they lie in one page and are attended, as PagedRows's floats are, and so are
// their scales, which lie in another pool: without that, every page's scales would be a miss the
// core waits for. For a head_dim of whole registers; otherwise PagedCodeRows.
template <class CodeFormat>
struct PagedCodesInPlace {
  using Codes = CodeFormat;
  const std::uint8_t* codes;
  const float* scales;  // one per row
  PageMap map;

  bool needs_buffer(std::size_t) const { return false; }
  detail::CodeBlock code_rows(std::size_t kv, std::size_t first, std::size_t count) const {
    const std::size_t row = map.row(kv, first), later = first + map.ahead;
    const bool one_page = later / map.block_size == (later + count - 1) / map.block_size;
    const bool ahead = later + count <= map.length && one_page;
    // The kernels prefetch the codes ahead; the page's scales (one line) are asked for here.
    if (ahead) detail::prefetch_line(scales + map.row(kv, later));
    return {codes + row * map.dim, map.dim, scales + row, ahead ? codes + map.row(kv, later) * map.dim : nullptr};
  }
};

}  // namespace

GqaDecodeOutput paged_decode_attention_split_k(const Tensor2& q, const PagedKvCache& cache,
                                               std::span<const std::size_t> block_table, std::size_t context_len,
                                               std::optional<double> scale, std::size_t splits) {
  constexpr const char* kFunction = "paged_decode_attention";
  const double scale_value = ref::validate_paged_decode(kFunction, q, cache, block_table, context_len, scale);
  const std::size_t heads = q.shape()[0], kv_heads = cache.num_kv_heads(), group = heads / kv_heads;
  const std::size_t d = cache.head_dim(), b = cache.block_size(), n = context_len;
  const ref::GqaDecodeDims dims{heads, kv_heads, group, block_table.size() * b, n, d, d, scale_value};
  // Work items over whole physical blocks: an item is a split of the positions for all g kv heads,
  // which, at each block of positions (paged_block), takes the heads in turn. A physical block of the
  // pool holds the pages of all g heads one after the other (g b d floats, 64 KiB at g = 8, b = 16,
  // d = 128), so its pages are read as a few sequential runs, where items (kv head, split) read
  // each page as an 8 KiB piece at a different time. Measured at 32K positions, 2 threads, a
  // shuffled table: 9.1 ms against 11.9 ms, the contiguous step taking 8.3 ms (at 128K, 41 against
  // 51 ms, contiguous 30), with blocks of 64 positions; kPagedBlockBytes says how long a block is
  // and how far ahead to prefetch. The splits are chosen for one item per split; piece = b: every request
  // to the cache lies in one page.
  const std::size_t block = paged_block(cache.bytes_per_token());
  const detail::SplitDecodeShape shape = detail::split_decode_shape(
      kFunction, "context_len", dims, splits, {.piece = b, .block = block, .heads_per_item = kv_heads});
  const PageMap map{block_table, kv_heads, b, d, n, block};
  GqaDecodeOutput result{Tensor2::from_shape({heads, d}), Tensor1::from_shape({heads})};
  float* out = result.out.data();
  float* lse = result.lse.data();
  // bf16, INT8 and FP8 pages are read in place by the kernels over codes when a head is whole registers.
  const bool in_place = d % detail::kLanes == 0;
  // The same kernel for every storage; only the row sources, which hand out a page's rows, differ.
  const auto run = [&](const auto& keys, const auto& values) { detail::split_k_decode(q.data(), shape, keys, values, out, lse); };
  switch (cache.storage()) {
    case PagedKvStorage::fp32:
      run(PagedRows{cache.key_blocks().data(), map}, PagedRows{cache.value_blocks().data(), map});
      break;
    case PagedKvStorage::bf16: {
      const std::uint16_t *k = cache.key_bits().data(), *v = cache.value_bits().data();
      if (in_place)
        run(PagedBf16InPlace{k, map}, PagedBf16InPlace{v, map});
      else
        run(PagedBf16Rows{k, map}, PagedBf16Rows{v, map});
      break;
    }
    case PagedKvStorage::int8:
    case PagedKvStorage::fp8_e4m3: {
      const std::uint8_t *kc = cache.key_codes().data(), *vc = cache.value_codes().data();
      const float *ks = cache.key_scales().data(), *vs = cache.value_scales().data();
      const bool int8 = cache.storage() == PagedKvStorage::int8;
      if (in_place && int8)
        run(PagedCodesInPlace<detail::Int8Codes>{kc, ks, map}, PagedCodesInPlace<detail::Int8Codes>{vc, vs, map});
      else if (in_place)
        run(PagedCodesInPlace<detail::E4m3Codes>{kc, ks, map}, PagedCodesInPlace<detail::E4m3Codes>{vc, vs, map});
      else if (int8)
        run(PagedInt8Rows{kc, ks, map}, PagedInt8Rows{vc, vs, map});
      else
        run(PagedE4m3Rows{kc, ks, map}, PagedE4m3Rows{vc, vs, map});
      break;
    }
  }
  ref::require_finite_decode_output(kFunction, result);
  return result;
}

GqaDecodeOutput paged_decode_attention_with_lse(const Tensor2& q, const PagedKvCache& cache,
                                                std::span<const std::size_t> block_table, std::size_t context_len,
                                                std::optional<double> scale) {
  return paged_decode_attention_split_k(q, cache, block_table, context_len, scale, 0);
}

Tensor2 paged_decode_attention(const Tensor2& q, const PagedKvCache& cache, std::span<const std::size_t> block_table,
                               std::size_t context_len, std::optional<double> scale) {
  return paged_decode_attention_with_lse(q, cache, block_table, context_len, scale).out;
}

}  // namespace tvlab::opt

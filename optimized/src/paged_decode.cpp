#include "tvlab/opt/paged_decode.hpp"

#include <omp.h>

#include <algorithm>

#include "tvlab/core/error.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/ref/paged_attention.hpp"

#include "detail/decode_checks.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

// The keys (or the values) of a paged cache, as split_k_decode requests them: the pool
// [num_blocks, g, b, dim] seen through the block table, position t being slot t mod b of physical
// block T[t / b]. With `piece` = b the kernel never requests positions of two pages at once, so a
// request is `count` consecutive rows of one page, read in place.
struct PagedRows {
  const float* pool;
  std::span<const std::size_t> table;
  std::size_t kv_heads, block_size, dim;
  std::size_t length;  // positions the step attends to: no page past them is prefetched

  // The b dim floats of kv head kv in the page that holds position t, from slot t mod b on.
  const float* page_rows(std::size_t kv, std::size_t t) const {
    return pool + ((table[t / block_size] * kv_heads + kv) * block_size + t % block_size) * dim;
  }

  // Positions [first, first + count) of head kv, all in one page: the page itself, or (width > dim)
  // the rows copied into `buffer` [count, width], whose padding the kernel keeps at 0. The rows
  // kPrefetchDistance positions later lie in another page, anywhere in the pool: the kernel
  // prefetches them from `ahead` when they too lie in one page (always, when b divides the distance)
  // and are attended. Pages of b = 16 positions are 8 KiB runs (d = 128) in random order, on
  // which the hardware prefetcher, following a stream of addresses, restarts at every page.
  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    const float* start = page_rows(kv, first);
    if (width != dim) {
      for (std::size_t c = 0; c < count; ++c) std::copy_n(start + c * dim, dim, buffer + c * width);
      return {buffer, width};
    }
    const std::size_t later = first + detail::kPrefetchDistance;
    const bool one_page = later / block_size == (later + count - 1) / block_size;
    return {start, dim, later + count <= length && one_page ? page_rows(kv, later) : nullptr};
  }
  bool needs_buffer(std::size_t width) const { return width != dim; }
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
  // piece = b: every request to the cache lies in one page (a block of 512 positions is 32 pages
  // of 16, or 33 when the split begins inside a page).
  const detail::SplitDecodeShape shape = detail::split_decode_shape(kFunction, "context_len", dims, splits, b);
  const PagedRows keys{cache.key_blocks().data(), block_table, kv_heads, b, d, n};
  const PagedRows values{cache.value_blocks().data(), block_table, kv_heads, b, d, n};
  GqaDecodeOutput result{Tensor2::from_shape({heads, d}), Tensor1::from_shape({heads})};
  detail::split_k_decode(q.data(), shape, keys, values, result.out.data(), result.lse.data());
  ref::require_finite_decode_output(kFunction, result);
  return result;
}

GqaDecodeOutput paged_decode_attention(const Tensor2& q, const PagedKvCache& cache,
                                       std::span<const std::size_t> block_table, std::size_t context_len,
                                       std::optional<double> scale) {
  return paged_decode_attention_split_k(q, cache, block_table, context_len, scale, 0);
}

}  // namespace tvlab::opt

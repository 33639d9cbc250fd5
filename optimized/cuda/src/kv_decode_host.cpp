// Host-tensor entry points of chapter 05's CUDA decode step: validate (the references' checks,
// before any device call, so that bad input is reported the same with or without a device), size
// the tiles and the splits, upload, launch, download. Compiled with or without nvcc.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/kv_decode.hpp"
#include "tvlab/cuda/kv_decode_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/ref/paged_attention.hpp"

namespace tvlab::cuda {
namespace {

constexpr std::size_t kHeadsPerBlock = 16;     // query heads per thread block, at most
constexpr std::size_t kTile = 32;              // positions staged at a time, at most
// Enough thread blocks to keep the memory system busy: four per multiprocessor of an H100 / H200
// (132), the best of 1 to 8 per multiprocessor measured on an H200 for GQA, MQA and MHA shapes.
constexpr std::size_t kTargetBlocks = 528;
constexpr std::size_t kMinSplitLength = 32;    // one tile: a shorter split's partial state costs more than its keys
constexpr std::size_t kGridYZ = 65535;         // the most thread blocks along y and z of a CUDA grid
constexpr std::size_t kGridX = 0x7fffffffU;    // and along x

// The query heads per thread block and the tile: 16 and 32, halved (the tile down to 8, then the
// heads, then the tile down to 1) until one thread block's shared memory fits the device.
void fit_shared_memory(const char* fn, device::DecodeArgs& a) {
  a.heads_per_block = std::min(a.heads / a.kv_heads, kHeadsPerBlock);
  a.tile = kTile;
  const std::size_t limit = device::max_shared_bytes_per_block();
  while (device::decode_shared_bytes(a) > limit) {
    if (a.tile > 8) {
      a.tile /= 2;
    } else if (a.heads_per_block > 1) {
      a.heads_per_block = (a.heads_per_block + 1) / 2;
    } else {
      require(a.tile > 1, fn, "head_dim (", a.head_dim, ") and head_dim_v (", a.head_dim_v,
              ") are too large for this device: one query head and one position need ",
              device::decode_shared_bytes(a), " bytes of shared memory, a thread block may use ", limit);
      a.tile /= 2;
    }
  }
}

// Cuts the positions into ranges of split_length = ceil(length / splits), each non-empty. `requested`
// 0 chooses the count: enough thread blocks to fill the device (kTargetBlocks with the kv heads and
// head chunks), no range shorter than kMinSplitLength positions.
void cut_positions(const char* fn, device::DecodeArgs& a, std::size_t requested) {
  const std::size_t group = a.heads / a.kv_heads;
  const std::size_t chunks = (group + a.heads_per_block - 1) / a.heads_per_block;
  require(a.kv_heads <= kGridYZ, fn, "the kv heads (", a.kv_heads, ") exceed the ", kGridYZ,
          " thread blocks along y of a CUDA grid");
  require(chunks <= kGridYZ, fn, "the query heads per kv head (", group, ") need ", chunks,
          " chunks of heads, beyond the ", kGridYZ, " thread blocks along z of a CUDA grid");
  require(a.heads <= kGridX, fn, "the query heads (", a.heads, ") exceed the ", kGridX,
          " thread blocks of the merge kernel's grid");
  std::size_t splits = requested;
  if (splits == 0) {
    const std::size_t blocks_per_split = a.kv_heads * chunks;
    splits = (kTargetBlocks + blocks_per_split - 1) / blocks_per_split;
    splits = std::min(splits, std::max<std::size_t>(1, a.length / kMinSplitLength));
  }
  splits = std::min({splits, a.length, kGridX});
  a.split_length = (a.length + splits - 1) / splits;
  a.splits = (a.length + a.split_length - 1) / a.split_length;  // the last range is non-empty
}

}  // namespace

namespace device {
void plan_decode(const char* function, DecodeArgs& args, std::size_t requested_splits) {
  fit_shared_memory(function, args);
  cut_positions(function, args, requested_splits);
}
}  // namespace device

namespace {

// The device side of one step after the keys and values are bound: the queries, the workspace and
// the outputs, all but the queries filled with NaN bytes first (an element the kernels never write
// comes back as NaN), the launch, and out [heads, head_dim_v] and lse [heads] copied back.
GqaDecodeOutput launch(device::DecodeArgs a, const Tensor2& q) {
  const DeviceBuffer<float> d_q(q.data(), q.size());
  DeviceBuffer<float> out(a.heads * a.head_dim_v), lse(a.heads), partial_m(a.splits * a.heads),
      partial_l(a.splits * a.heads), partial_o(a.splits * a.heads * a.head_dim_v);
  for (const DeviceBuffer<float>* buffer : {&out, &lse, &partial_m, &partial_l, &partial_o})
    device::fill_bytes(buffer->get(), 0xff, buffer->size() * sizeof(float));
  a.q = d_q.get();
  a.out = out.get();
  a.lse = lse.get();
  a.partial_m = partial_m.get();
  a.partial_l = partial_l.get();
  a.partial_o = partial_o.get();
  device::decode_attention(a);
  GqaDecodeOutput result{Tensor2::from_shape({a.heads, a.head_dim_v}), Tensor1::from_shape({a.heads})};
  out.download(result.out.data());
  lse.download(result.lse.data());
  return result;
}

GqaDecodeOutput gqa_decode(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache, std::size_t length,
                           std::optional<double> scale, std::size_t requested_splits) {
  const char* fn = "gqa_decode_attention";
  const ref::GqaDecodeDims dims = ref::validate_gqa_decode(fn, q, k_cache, v_cache, length, scale);
  device::DecodeArgs a;
  a.heads = dims.heads;
  a.kv_heads = dims.kv_heads;
  a.length = dims.length;
  a.head_dim = dims.d;
  a.head_dim_v = dims.d_v;
  a.k_stride = dims.d;
  a.v_stride = dims.d_v;
  a.capacity = dims.capacity;
  a.scale = static_cast<float>(dims.scale);
  device::plan_decode(fn, a, requested_splits);
  // The whole caches: the kernel reads only the first `length` positions of each kv head.
  const DeviceBuffer<float> k(k_cache.data(), k_cache.size()), v(v_cache.data(), v_cache.size());
  a.k = k.get();
  a.v = v.get();
  GqaDecodeOutput result = launch(a, q);
  ref::require_finite_decode_output(fn, result);
  return result;
}

GqaDecodeOutput paged_decode(const Tensor2& q, const PagedKvCache& cache, std::span<const std::size_t> block_table,
                     std::size_t context_len, std::optional<double> scale, std::size_t requested_splits) {
  const char* fn = "paged_decode_attention";
  const double s = ref::validate_paged_decode(fn, q, cache, block_table, context_len, scale);
  require(cache.storage() == PagedKvStorage::fp32, fn, "cache stores ", storage_name(cache.storage()),
          "; the CUDA paged kernel reads fp32 pools only (use the ref or opt backend for bf16, int8 and fp8_e4m3)");
  device::DecodeArgs a;
  a.heads = q.shape()[0];
  a.kv_heads = cache.num_kv_heads();
  a.length = context_len;
  a.head_dim = a.head_dim_v = a.k_stride = a.v_stride = cache.head_dim();
  a.block_size = cache.block_size();
  a.scale = static_cast<float>(s);
  device::plan_decode(fn, a, requested_splits);
  // The pools as they are, and the table's entries for the ceil(n / b) blocks the tokens fill.
  const std::size_t blocks = (context_len + a.block_size - 1) / a.block_size;
  const std::vector<unsigned long long> table(block_table.begin(), block_table.begin() + static_cast<std::ptrdiff_t>(blocks));
  const DeviceBuffer<unsigned long long> d_table(table.data(), table.size());
  const DeviceBuffer<float> k(cache.key_blocks().data(), cache.key_blocks().size()),
      v(cache.value_blocks().data(), cache.value_blocks().size());
  a.k = k.get();
  a.v = v.get();
  a.block_table = d_table.get();
  GqaDecodeOutput result = launch(a, q);
  ref::require_finite_decode_output(fn, result);
  return result;
}

MlaDecodeAttention mla_decode(const Tensor2& q_absorbed, const Tensor2& latents, const Tensor2& rope_keys,
                              std::size_t length, double scale, std::size_t requested_splits) {
  const char* fn = "mla_absorbed_decode_attention";
  const double q_max = ref::validate_mla_decode_attention(fn, q_absorbed, latents, rope_keys, length, scale);
  ref::check_mla_decode_cache(fn, latents, rope_keys, length, q_max, scale);
  const std::size_t d_c = latents.shape()[1], d_r = rope_keys.shape()[1], width = d_c + d_r;
  device::DecodeArgs a;
  a.heads = q_absorbed.shape()[0];
  a.kv_heads = 1;  // every head reads the same cache: one group of n_h heads
  a.length = length;
  a.head_dim = a.k_stride = a.v_stride = width;
  a.head_dim_v = d_c;
  a.values_in_keys = true;  // the values c^KV_j are the first d_c columns of the key rows
  a.capacity = length;
  a.scale = static_cast<float>(scale);
  device::plan_decode(fn, a, requested_splits);
  // Row j of the device cache is [c^KV_j; k^R_j], d_c + d_h^R floats: the first `length` rows only.
  std::vector<float> rows(length * width);
  for (std::size_t j = 0; j < length; ++j) {
    std::copy_n(latents.data() + j * d_c, d_c, rows.begin() + static_cast<std::ptrdiff_t>(j * width));
    std::copy_n(rope_keys.data() + j * d_r, d_r, rows.begin() + static_cast<std::ptrdiff_t>(j * width + d_c));
  }
  const DeviceBuffer<float> cache(rows.data(), rows.size());
  a.k = a.v = cache.get();
  GqaDecodeOutput r = launch(a, q_absorbed);
  return {std::move(r.out), std::move(r.lse)};
}

void require_splits(const char* fn, std::size_t splits) {
  require(splits >= 1, fn, "splits (", splits, ") must be >= 1");
}

}  // namespace

GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale) {
  return gqa_decode(q, k_cache, v_cache, length, scale, 0);
}

GqaDecodeOutput gqa_decode_attention_split_k(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                             std::size_t length, std::optional<double> scale, std::size_t splits) {
  require_splits("gqa_decode_attention", splits);
  return gqa_decode(q, k_cache, v_cache, length, scale, splits);
}

GqaDecodeOutput paged_decode_attention_with_lse(const Tensor2& q, const PagedKvCache& cache,
                                                std::span<const std::size_t> block_table, std::size_t context_len,
                                                std::optional<double> scale) {
  return paged_decode(q, cache, block_table, context_len, scale, 0);
}

Tensor2 paged_decode_attention(const Tensor2& q, const PagedKvCache& cache, std::span<const std::size_t> block_table,
                               std::size_t context_len, std::optional<double> scale) {
  return paged_decode(q, cache, block_table, context_len, scale, 0).out;
}

GqaDecodeOutput paged_decode_attention_split_k(const Tensor2& q, const PagedKvCache& cache,
                                       std::span<const std::size_t> block_table, std::size_t context_len,
                                       std::optional<double> scale, std::size_t splits) {
  require_splits("paged_decode_attention", splits);
  return paged_decode(q, cache, block_table, context_len, scale, splits);
}

MlaDecodeAttention mla_absorbed_decode_attention(const Tensor2& q_absorbed, const Tensor2& latents,
                                                 const Tensor2& rope_keys, std::size_t length, double scale) {
  return mla_decode(q_absorbed, latents, rope_keys, length, scale, 0);
}

MlaDecodeAttention mla_absorbed_decode_attention_split_k(const Tensor2& q_absorbed, const Tensor2& latents,
                                                         const Tensor2& rope_keys, std::size_t length, double scale,
                                                         std::size_t splits) {
  require_splits("mla_absorbed_decode_attention", splits);
  return mla_decode(q_absorbed, latents, rope_keys, length, scale, splits);
}

}  // namespace tvlab::cuda

// Host-tensor entry points of chapter 03's CUDA kernels: validate (exactly as the reference),
// upload, launch, download. Compiled with or without nvcc.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/cuda/sparse_attention.hpp"
#include "tvlab/cuda/sparse_attention_device.hpp"
#include "attention_args.hpp"

namespace tvlab::cuda {
namespace {

// One thread per query row: a thread block holds at most 1024.
constexpr std::size_t kMaxThreadsPerBlock = 1024;
// The block-sparse kernel stages at most this many keys (and their values) at a time: 64 KiB at
// head_dim 64, so that a few thread blocks share a multiprocessor even when the layout's key
// blocks are wide.
constexpr std::size_t kMaxStagedKeys = 128;
// The sliding-window kernel's tiles: 64 query rows per thread block, key tiles of 64 keys.
constexpr std::size_t kWindowTileRows = 64, kWindowTileKeys = 64;
// A CUDA grid has at most 2^31 - 1 blocks along x.
constexpr std::size_t kMaxGridBlocks = 0x7fffffffU;

// The shapes of q [heads, seq_q, head_dim], k [heads, seq_k, head_dim], v [heads, seq_k, head_dim_v]
// and the scale, into a kernel's argument struct.
template <class Args>
Args shapes_of(const Tensor3& q, const Tensor3& k, const Tensor3& v, double scale) {
  Args args;
  args.heads = q.shape()[0];
  args.seq_q = q.shape()[1];
  args.head_dim = q.shape()[2];
  args.seq_k = k.shape()[1];
  args.head_dim_v = v.shape()[2];
  args.scale = static_cast<float>(scale);
  return args;
}

// The kernels' device outputs: out [heads, seq_q, head_dim_v], lse [heads, seq_q] and `counters`
// tile counters (zeroed), downloaded into a FlashOutput.
struct DeviceOutputs {
  std::size_t heads, seq_q, head_dim_v;
  DeviceBuffer<float> out, lse;
  DeviceBuffer<unsigned long long> counts;

  DeviceOutputs(std::size_t h, std::size_t n, std::size_t dv, std::size_t counters)
      : heads(h), seq_q(n), head_dim_v(dv), out(h * n * dv), lse(h * n), counts(counters) {
    device::fill_bytes(counts.get(), 0, counters * sizeof(unsigned long long));
  }

  // tiles_computed from the first counter, tiles_skipped from the second when there is one.
  FlashOutput download() const {
    FlashOutput r{Tensor3::from_shape({heads, seq_q, head_dim_v}), Tensor2::from_shape({heads, seq_q}), 0, 0};
    out.download(r.out.data());
    lse.download(r.lse.data());
    std::vector<unsigned long long> tiles(counts.size(), 0);
    counts.download(tiles.data());
    r.tiles_computed = static_cast<std::size_t>(tiles[0]);
    if (tiles.size() > 1) r.tiles_skipped = static_cast<std::size_t>(tiles[1]);
    return r;
  }
};

// The most rows (at most `wanted`, at least 1) a kernel may stage when its shared memory, by its
// own formula `shared_bytes` (linear in the rows), must fit `limit` bytes.
template <class Args>
std::size_t rows_that_fit(Args args, std::size_t Args::*rows, std::size_t (*shared_bytes)(const Args&),
                          std::size_t wanted, std::size_t limit) {
  args.*rows = 1;
  return std::max<std::size_t>(1, std::min(wanted, limit / shared_bytes(args)));
}

// Every layout's arrays one after the other, as `device::BlockSparseArgs` reads them, with the
// descriptor of each (its tile sizes and where its entries start).
struct PackedLayouts {
  std::vector<device::DeviceBlockLayout> views;
  std::vector<unsigned long long> block_start;
  std::vector<std::uint32_t> key_blocks;
  std::vector<std::int32_t> partial;
  std::vector<std::uint8_t> masks;
};

// Packs the (validated) layouts; `rows_per_block` threads cover min(block_q, seq_q) rows of a
// query block in `parts` thread blocks.
PackedLayouts pack(const HeadLayouts& layouts, std::size_t rows_per_block) {
  PackedLayouts packed;
  for (const BlockLayout& layout : layouts) {
    const std::size_t rows = std::min(layout.block_q, layout.seq_q);
    packed.views.push_back({.block_q = layout.block_q,
                            .block_k = layout.block_k,
                            .query_blocks = layout.query_blocks(),
                            .parts = (rows + rows_per_block - 1) / rows_per_block,
                            .starts_at = packed.block_start.size(),
                            .masks_at = packed.masks.size()});
    // This layout's offsets point past the entries of the layouts before it.
    const std::size_t shift = packed.key_blocks.size();
    for (const std::size_t offset : layout.block_start) packed.block_start.push_back(shift + offset);
    packed.key_blocks.insert(packed.key_blocks.end(), layout.key_blocks.begin(), layout.key_blocks.end());
    packed.partial.insert(packed.partial.end(), layout.partial.begin(), layout.partial.end());
    packed.masks.insert(packed.masks.end(), layout.masks.begin(), layout.masks.end());
  }
  return packed;
}

}  // namespace

FlashOutput block_sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                   std::optional<double> scale) {
  // The reference's checks, in the same order and words.
  const char* fn = "block_sparse_attention";
  const double s = validate_sparse_attention(fn, q, k, v, scale);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1];
  validate_head_layouts(fn, "layouts", layouts, heads, seq_q, seq_k);

  auto args = shapes_of<device::BlockSparseArgs>(q, k, v, s);
  // One thread per row of the widest query block (rows past the sequence need none), at most 1024.
  std::size_t widest_rows = 1, widest_keys = 1;
  for (const BlockLayout& layout : layouts) {
    widest_rows = std::max(widest_rows, std::min(layout.block_q, seq_q));
    widest_keys = std::max(widest_keys, std::min(layout.block_k, seq_k));
  }
  args.rows_per_block = std::min(widest_rows, kMaxThreadsPerBlock);
  const PackedLayouts packed = pack(layouts, args.rows_per_block);
  args.layout_count = layouts.size();
  args.blocks_per_head = 1;
  for (const device::DeviceBlockLayout& view : packed.views)
    args.blocks_per_head = std::max<std::size_t>(args.blocks_per_head, view.query_blocks * view.parts);
  require(heads * args.blocks_per_head <= kMaxGridBlocks, fn, "heads x query blocks (", heads * args.blocks_per_head,
          ") exceeds the 2^31 - 1 blocks of a CUDA grid");
  // Keys staged at a time: a whole key block when it fits, never more than shared memory allows.
  args.stage_k = rows_that_fit(args, &device::BlockSparseArgs::stage_k, device::block_sparse_shared_bytes,
                               std::min(widest_keys, kMaxStagedKeys), device::max_shared_bytes_per_block());

  const DeviceQkv<float> inputs(q, k, v);
  const DeviceBuffer<device::DeviceBlockLayout> views(packed.views.data(), packed.views.size());
  const DeviceBuffer<unsigned long long> block_start(packed.block_start.data(), packed.block_start.size());
  const DeviceBuffer<std::uint32_t> key_blocks(packed.key_blocks.data(), packed.key_blocks.size());
  const DeviceBuffer<std::int32_t> partial(packed.partial.data(), packed.partial.size());
  const DeviceBuffer<std::uint8_t> masks(packed.masks.data(), packed.masks.size());
  const DeviceOutputs outputs(heads, seq_q, args.head_dim_v, 1);
  inputs.bind(args);
  args.layouts = views.get();
  args.block_start = block_start.get();
  args.key_blocks = key_blocks.get();
  args.partial = partial.get();
  args.masks = masks.get();
  args.out = outputs.out.get();
  args.lse = outputs.lse.get();
  args.tiles_computed = outputs.counts.get();
  device::block_sparse_forward(args);
  return outputs.download();
}

FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale) {
  // The reference's checks, in the same order and words.
  const char* fn = "sliding_window_attention";
  const double s = validate_sparse_attention(fn, q, k, v, scale);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1];
  validate_sliding_window(fn, window, seq_q, seq_k);

  auto args = shapes_of<device::SlidingWindowArgs>(q, k, v, s);
  // A window reaching past either end of the keys sees what one reaching exactly to it sees; the
  // kernel's positions then stay within [-n_k, 2 n_k].
  const auto keys = static_cast<long long>(seq_k);
  args.left = std::min(window.left, keys);
  args.right = std::min(window.right, keys);
  // Tiles no larger than the sequences, key tiles no larger than shared memory allows.
  args.block_q = std::min(kWindowTileRows, seq_q);
  args.block_k = rows_that_fit(args, &device::SlidingWindowArgs::block_k, device::sliding_window_shared_bytes,
                               std::min(kWindowTileKeys, seq_k), device::max_shared_bytes_per_block());
  const std::size_t blocks = heads * ((seq_q + args.block_q - 1) / args.block_q);
  require(blocks <= kMaxGridBlocks, fn, "heads x query tiles (", blocks,
          ") exceeds the 2^31 - 1 blocks of a CUDA grid");

  const DeviceQkv<float> inputs(q, k, v);
  const DeviceOutputs outputs(heads, seq_q, args.head_dim_v, 2);
  inputs.bind(args);
  args.out = outputs.out.get();
  args.lse = outputs.lse.get();
  args.tile_counts = outputs.counts.get();
  device::sliding_window_forward(args);
  return outputs.download();
}

}  // namespace tvlab::cuda

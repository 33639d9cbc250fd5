// Host-tensor entry points of the CUDA flash attention: validate, upload, launch, download.
// Compiled with or without nvcc.

#include <algorithm>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/flash_attention.hpp"
#include "tvlab/cuda/flash_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {
namespace {

// The (query tile, key tile) pairs the tiled algorithm computes and skips: the same rule as
// ref::flash_attention_forward, counted on the host (the kernels do not report it).
void count_tiles(FlashOutput& r, std::size_t heads, std::size_t seq_q, std::size_t seq_k, const FlashConfig& cfg) {
  const std::size_t k_tiles = (seq_k + cfg.block_k - 1) / cfg.block_k, shift = seq_k - seq_q;
  for (std::size_t r0 = 0; r0 < seq_q; r0 += cfg.block_q) {
    const std::size_t last = std::min(seq_q, r0 + cfg.block_q) - 1;
    const std::size_t seen = cfg.causal ? std::min(k_tiles, (last + shift) / cfg.block_k + 1) : k_tiles;
    r.tiles_computed += heads * seen;
    r.tiles_skipped += heads * (k_tiles - seen);
  }
}

FlashOutput run(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg, bool tiled) {
  const char* fn = "flash_attention_forward";
  const double scale = validate_flash(fn, q, k, v, cfg);
  require(cfg.fp8 == Fp8Scaling::none, fn, "fp8 emulation (cfg.fp8) is implemented by ref::flash_attention_forward only");
  device::FlashArgs args;
  args.heads = q.shape()[0];
  args.seq_q = q.shape()[1];
  args.head_dim = q.shape()[2];
  args.seq_k = k.shape()[1];
  args.head_dim_v = v.shape()[2];
  args.block_q = cfg.block_q;
  args.block_k = cfg.block_k;
  args.scale = static_cast<float>(scale);
  args.causal = cfg.causal;
  if (tiled) {
    require(cfg.block_q <= 1024, fn, "block_q (", cfg.block_q, ") must be <= 1024: one thread per query row");
    const std::size_t shared = device::flash_tiled_shared_bytes(args), limit = device::max_shared_bytes_per_block();
    require(shared <= limit, fn, "block_k (", cfg.block_k, ") needs ", shared,
            " bytes of shared memory for a key and a value tile; this device allows ", limit);
  }
  DeviceBuffer<float> dq(q.data(), q.size()), dk(k.data(), k.size()), dv(v.data(), v.size());
  DeviceBuffer<float> dout(args.heads * args.seq_q * args.head_dim_v), dlse(args.heads * args.seq_q);
  args.q = dq.get();
  args.k = dk.get();
  args.v = dv.get();
  args.out = dout.get();
  args.lse = dlse.get();
  if (tiled) {
    device::flash_forward_tiled(args);
  } else {
    device::flash_forward_rowwise(args);
  }
  FlashOutput r{Tensor3::from_shape({args.heads, args.seq_q, args.head_dim_v}), Tensor2::from_shape({args.heads, args.seq_q}), 0, 0};
  dout.download(r.out.data());
  dlse.download(r.lse.data());
  count_tiles(r, args.heads, args.seq_q, args.seq_k, cfg);
  return r;
}

}  // namespace

FlashOutput flash_attention_forward_rowwise(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  return run(q, k, v, cfg, /*tiled=*/false);
}

FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  return run(q, k, v, cfg, /*tiled=*/true);
}

}  // namespace tvlab::cuda

// Host-tensor entry points of the CUDA flash attention: validate, upload, launch, download.
// Compiled with or without nvcc.

#include <algorithm>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/flash_attention.hpp"
#include "tvlab/cuda/flash_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {
namespace {

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
  // Tiles never larger than the sequences (as the CPU versions), and key tiles no larger than the
  // device's shared memory allows.
  args.block_q = std::min(cfg.block_q, args.seq_q);
  args.block_k = std::min(cfg.block_k, args.seq_k);
  args.scale = static_cast<float>(scale);
  args.causal = cfg.causal;
  if (tiled) {
    require(args.block_q <= 1024, fn, "block_q (", cfg.block_q, ") must be <= 1024: one thread per query row");
    const std::size_t limit = device::max_shared_bytes_per_block();
    const std::size_t row_bytes = (args.head_dim + args.head_dim_v) * sizeof(float);
    args.block_k = std::max<std::size_t>(1, std::min(args.block_k, limit / row_bytes));
  }
  DeviceBuffer<float> dq(q.data(), q.size()), dk(k.data(), k.size()), dv(v.data(), v.size());
  DeviceBuffer<float> dout(args.heads * args.seq_q * args.head_dim_v), dlse(args.heads * args.seq_q);
  const unsigned long long zero[2] = {0, 0};
  DeviceBuffer<unsigned long long> counts(zero, 2);
  args.tile_counts = counts.get();
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
  if (tiled) {
    unsigned long long tiles[2] = {0, 0};
    counts.download(tiles);
    r.tiles_computed = static_cast<std::size_t>(tiles[0]);
    r.tiles_skipped = static_cast<std::size_t>(tiles[1]);
  }
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

// Host-tensor entry points of the CUDA flash attention: validate, upload, launch, download.
// Compiled with or without nvcc.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/flash_attention.hpp"
#include "tvlab/cuda/flash_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "attention_shapes.hpp"

namespace tvlab::cuda {
namespace {

// The forward kernels' device outputs (out, lse, and the two tile counters) and their download.
struct ForwardOutputs {
  std::size_t heads, seq_q, head_dim_v;
  DeviceBuffer<float> out, lse;
  DeviceBuffer<unsigned long long> counts{2};

  ForwardOutputs(std::size_t h, std::size_t n, std::size_t dv)
      : heads(h), seq_q(n), head_dim_v(dv), out(h * n * dv), lse(h * n) {
    device::fill_bytes(counts.get(), 0, 2 * sizeof(unsigned long long));
  }

  FlashOutput download() const {
    FlashOutput r{Tensor3::from_shape({heads, seq_q, head_dim_v}), Tensor2::from_shape({heads, seq_q}), 0, 0};
    out.download(r.out.data());
    lse.download(r.lse.data());
    unsigned long long tiles[2] = {0, 0};
    counts.download(tiles);
    r.tiles_computed = static_cast<std::size_t>(tiles[0]);
    r.tiles_skipped = static_cast<std::size_t>(tiles[1]);
    return r;
  }
};

FlashOutput run(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg, bool tiled) {
  const char* fn = "flash_attention_forward";
  const double scale = validate_flash(fn, q, k, v, cfg);
  require_fp32_flash(fn, cfg);
  require_supported(fn, cfg.mask, kFlashMaskSupport);
  auto args = attention_shapes<device::FlashArgs>(q, k, v, scale, cfg.mask.causal);
  // Tiles never larger than the sequences (as the CPU versions), and key tiles no larger than the
  // device's shared memory allows.
  args.block_q = std::min(cfg.block_q, args.seq_q);
  args.block_k = std::min(cfg.block_k, args.seq_k);
  if (tiled) {
    require(args.block_q <= 1024, fn, "block_q (", cfg.block_q, ") must be <= 1024: one thread per query row");
    const std::size_t limit = device::max_shared_bytes_per_block();
    const std::size_t row_bytes = (args.head_dim + args.head_dim_v) * sizeof(float);
    args.block_k = std::max<std::size_t>(1, std::min(args.block_k, limit / row_bytes));
  }
  DeviceBuffer<float> dq(q.data(), q.size()), dk(k.data(), k.size()), dv(v.data(), v.size());
  ForwardOutputs outputs(args.heads, args.seq_q, args.head_dim_v);
  args.q = dq.get();
  args.k = dk.get();
  args.v = dv.get();
  args.out = outputs.out.get();
  args.lse = outputs.lse.get();
  args.tile_counts = outputs.counts.get();
  if (tiled) {
    device::flash_forward_tiled(args);
  } else {
    device::flash_forward_rowwise(args);  // counts no tiles: both counters stay 0
  }
  return outputs.download();
}

std::size_t round_up_16(std::size_t x) { return (x + 15) / 16 * 16; }

}  // namespace

FlashOutput flash_attention_forward_tensor_core(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                                const FlashConfig& cfg) {
  const char* fn = "flash_attention_forward_tensor_core";
  const double scale = validate_flash(fn, q, k, v, cfg);
  require(cfg.inputs == FlashInputs::fp16 || cfg.inputs == FlashInputs::bf16, fn, "cfg.inputs = ",
          to_string(cfg.inputs), ": tensor cores multiply 16-bit inputs; set cfg.inputs to fp16 or bf16");
  require_supported(fn, cfg.mask, kFlashMaskSupport);
  require(cfg.block_q % 16 == 0 && cfg.block_q <= 128, fn, "block_q (", cfg.block_q,
          ") must be a multiple of 16 (the MMA tile) and <= 128 (one warp per 16 rows, 8 warps at most)");
  require(cfg.block_k % 16 == 0, fn, "block_k (", cfg.block_k, ") must be a multiple of 16 (the MMA tile)");
  const int capability = device::compute_capability();
  require(capability >= 80, fn, "needs a device of compute capability 8.0 or later (bf16 WMMA), found ", capability);
  auto args = attention_shapes<device::FlashTensorCoreArgs>(q, k, v, scale, cfg.mask.causal);
  args.bf16 = cfg.inputs == FlashInputs::bf16;
  // Tiles no larger than the sequences (rounded up to the MMA tile), then shrunk 16 rows at a
  // time, the larger one first (the key tile on a tie), until one block's shared memory fits.
  args.block_q = std::min(cfg.block_q, round_up_16(args.seq_q));
  args.block_k = std::min(cfg.block_k, round_up_16(args.seq_k));
  const std::size_t limit = device::max_shared_bytes_per_block();
  while (device::flash_tensor_core_shared_bytes(args) > limit) {
    require(args.block_k > 16 || args.block_q > 16, fn, "16 x 16 tiles do not fit the device's shared memory");
    if (args.block_k >= args.block_q) {
      args.block_k -= 16;
    } else {
      args.block_q -= 16;
    }
  }
  const std::size_t blocks = args.heads * ((args.seq_q + args.block_q - 1) / args.block_q);
  require(blocks <= 0x7fffffffU, fn, "heads x query tiles (", blocks, ") exceeds the 2^31 - 1 blocks of a CUDA grid");
  const std::vector<std::uint16_t> hq = to_16_bit_inputs(q, cfg.inputs), hk = to_16_bit_inputs(k, cfg.inputs),
                                   hv = to_16_bit_inputs(v, cfg.inputs);
  DeviceBuffer<std::uint16_t> dq(hq.data(), hq.size()), dk(hk.data(), hk.size()), dv(hv.data(), hv.size());
  ForwardOutputs outputs(args.heads, args.seq_q, args.head_dim_v);
  args.q = dq.get();
  args.k = dk.get();
  args.v = dv.get();
  args.out = outputs.out.get();
  args.lse = outputs.lse.get();
  args.tile_counts = outputs.counts.get();
  device::flash_forward_tensor_core(args);
  return outputs.download();
}

FlashGrads flash_attention_backward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                    const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  const char* fn = "flash_attention_backward";
  const double scale = validate_flash_backward(fn, q, k, v, out, lse, dout, cfg);
  require_supported(fn, cfg.mask, kFlashMaskSupport);
  auto args = attention_shapes<device::FlashBackwardArgs>(q, k, v, scale, cfg.mask.causal);
  // One thread per row in both passes: tiles no larger than the sequences and 1024 rows, and
  // each pass's staged tile no larger than the device's shared memory allows.
  args.block_q = std::min(cfg.block_q, args.seq_q);
  args.block_k = std::min(cfg.block_k, args.seq_k);
  require(args.block_q <= 1024, fn, "block_q (", cfg.block_q, ") must be <= 1024: one thread per query row");
  require(args.block_k <= 1024, fn, "block_k (", cfg.block_k, ") must be <= 1024: one thread per key row");
  const std::size_t limit = device::max_shared_bytes_per_block();
  args.block_q = std::max<std::size_t>(1, std::min(args.block_q, limit / ((args.head_dim + args.head_dim_v + 2) * sizeof(float))));
  args.block_k = std::max<std::size_t>(1, std::min(args.block_k, limit / ((args.head_dim + args.head_dim_v) * sizeof(float))));
  const std::size_t blocks = args.heads * ((std::max(args.seq_q, args.seq_k) + std::min(args.block_q, args.block_k) - 1) /
                                           std::min(args.block_q, args.block_k));
  require(blocks <= 0x7fffffffU, fn, "heads x tiles (", blocks, ") exceeds the 2^31 - 1 blocks of a CUDA grid");
  DeviceBuffer<float> dq_in(q.data(), q.size()), dk_in(k.data(), k.size()), dv_in(v.data(), v.size());
  DeviceBuffer<float> d_out(out.data(), out.size()), d_lse(lse.data(), lse.size()), d_dout(dout.data(), dout.size());
  DeviceBuffer<float> delta(lse.size()), dq(q.size()), dk(k.size()), dv(v.size());
  args.q = dq_in.get();
  args.k = dk_in.get();
  args.v = dv_in.get();
  args.out = d_out.get();
  args.lse = d_lse.get();
  args.dout = d_dout.get();
  args.delta = delta.get();
  args.dq = dq.get();
  args.dk = dk.get();
  args.dv = dv.get();
  device::flash_backward(args);
  FlashGrads g{Tensor3::from_shape(q.shape()), Tensor3::from_shape(k.shape()), Tensor3::from_shape(v.shape())};
  dq.download(g.dq.data());
  dk.download(g.dk.data());
  dv.download(g.dv.data());
  return g;
}

FlashOutput flash_attention_forward_rowwise(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  return run(q, k, v, cfg, /*tiled=*/false);
}

FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  return run(q, k, v, cfg, /*tiled=*/true);
}

}  // namespace tvlab::cuda

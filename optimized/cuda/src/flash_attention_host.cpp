// Host-tensor entry points of the CUDA flash attention: validate, upload, launch, download.
// Compiled with or without nvcc.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/flash_attention.hpp"
#include "tvlab/cuda/flash_attention_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "attention_args.hpp"

namespace tvlab::cuda {
namespace {

// The forward kernels' device outputs (out, lse, and the two tile counters), the argument
// struct's pointers to them, and their download.
struct ForwardOutputs {
  std::size_t heads, seq_q, head_dim_v;
  DeviceBuffer<float> out, lse;
  DeviceBuffer<unsigned long long> counts{2};

  ForwardOutputs(std::size_t h, std::size_t n, std::size_t dv)
      : heads(h), seq_q(n), head_dim_v(dv), out(h * n * dv), lse(h * n) {
    device::fill_bytes(counts.get(), 0, 2 * sizeof(unsigned long long));
  }

  template <class Args>
  void bind(Args& args) const {
    args.out = out.get();
    args.lse = lse.get();
    args.tile_counts = counts.get();
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

// Runs a forward kernel on inputs already on the device and downloads its outputs.
template <class Args, class T>
FlashOutput run_forward(Args args, const DeviceQkv<T>& inputs, void (*kernel)(const Args&)) {
  ForwardOutputs outputs(args.heads, args.seq_q, args.head_dim_v);
  inputs.bind(args);
  outputs.bind(args);
  kernel(args);
  return outputs.download();
}

// The largest tile (at most the tile already in `args`, at least 1 row) whose staged rows fit
// `limit` bytes of shared memory, by the kernel's own formula `shared_bytes` (linear in the tile).
template <class Args>
std::size_t rows_that_fit(Args args, std::size_t Args::*tile, std::size_t (*shared_bytes)(const Args&),
                          std::size_t limit) {
  const std::size_t rows = args.*tile;
  args.*tile = 1;
  return std::max<std::size_t>(1, std::min(rows, limit / shared_bytes(args)));
}

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
    args.block_k = rows_that_fit(args, &device::FlashArgs::block_k, device::flash_tiled_shared_bytes,
                                 device::max_shared_bytes_per_block());
  }
  // The rowwise kernel counts no tiles: both counters stay 0.
  return run_forward(args, DeviceQkv<float>(q, k, v), tiled ? device::flash_forward_tiled : device::flash_forward_rowwise);
}

std::size_t round_up_16(std::size_t x) { return (x + 15) / 16 * 16; }

// The layout is the kernel's own (flash_attention_device.hpp), computed at compile time here: with
// 64 x 64 tiles at head_dim 64 a block needs 70 KiB, beyond the 48 KiB a kernel gets without
// opting in.
static_assert(device::flash_tensor_core_layout(64, 64, 64, 64).bytes == 70 * 1024);

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
  return run_forward(args, DeviceQkv<std::uint16_t>(hq, hk, hv), device::flash_forward_tensor_core);
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
  args.block_q = rows_that_fit(args, &device::FlashBackwardArgs::block_q, device::flash_backward_dkdv_shared_bytes, limit);
  args.block_k = rows_that_fit(args, &device::FlashBackwardArgs::block_k, device::flash_backward_dq_shared_bytes, limit);
  const std::size_t blocks = args.heads * ((std::max(args.seq_q, args.seq_k) + std::min(args.block_q, args.block_k) - 1) /
                                           std::min(args.block_q, args.block_k));
  require(blocks <= 0x7fffffffU, fn, "heads x tiles (", blocks, ") exceeds the 2^31 - 1 blocks of a CUDA grid");
  const DeviceQkv<float> inputs(q, k, v);
  DeviceBuffer<float> d_out(out.data(), out.size()), d_lse(lse.data(), lse.size()), d_dout(dout.data(), dout.size());
  DeviceBuffer<float> delta(lse.size()), dq(q.size()), dk(k.size()), dv(v.size());
  inputs.bind(args);
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

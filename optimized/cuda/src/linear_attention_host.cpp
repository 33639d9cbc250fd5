// Host-tensor entry points of chapter 06's CUDA linear attention: validate (the reference's checks),
// upload, launch, download; the reference's answer or error where the device flags a row.
// Compiled with or without nvcc.

#include "tvlab/cuda/linear_attention.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/linear_attention_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/ref/linear_attention.hpp"
#include "state_kernel_checks.hpp"

namespace tvlab::cuda {
namespace {

// One pass on the device from `state`; the new state is committed only when no row was flagged.
// Returns false (state untouched) when a normaliser was zero or a value not finite.
bool run_on_device(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg,
                   std::size_t chunk_size, LinearAttentionState& state, Tensor3& out) {
  DeviceBuffer<float> dq(q.data(), q.size()), dk(k.data(), k.size()), dv(v.data(), v.size());
  DeviceBuffer<float> ds(state.s.data(), state.s.size()), dz(state.z.data(), state.z.size()), dz_out(state.z.size());
  DeviceBuffer<float> dout(out.size());
  const int no_fault = 0;
  DeviceBuffer<int> fault(&no_fault, 1);
  device::LinearAttentionArgs args;
  args.q = dq.get();
  args.k = dk.get();
  args.v = dv.get();
  args.s = ds.get();
  args.z = dz.get();
  args.z_out = dz_out.get();
  args.out = dout.get();
  args.fault = fault.get();
  args.heads = q.shape()[0];
  args.n = q.shape()[1];
  args.m = q.shape()[2];
  args.d_v = v.shape()[2];
  args.feature_map = static_cast<device::LinearFeatureMap>(cfg.feature_map);
  args.normalize = cfg.normalize;
  args.scale = static_cast<float>(cfg.scale);
  args.chunk_size = chunk_size;
  device::causal_linear_attention(args);
  int flagged = 0;
  fault.download(&flagged);
  if (flagged != 0) return false;
  dout.download(out.data());
  ds.download(state.s.data());
  dz_out.download(state.z.data());
  return true;
}

}  // namespace

Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state) {
  const char* fn = "causal_linear_attention_recurrent";
  ref::validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  ref::validate_linear_attention_state(fn, state, q, v);
  detail::require_float_scale(fn, cfg.scale);
  detail::require_shared_memory_fits(fn, device::linear_attention_shared_bytes(q.shape()[2], 0), 0, q.shape()[2]);
  Tensor3 out = Tensor3::from_shape({q.shape()[0], q.shape()[1], v.shape()[2]});
  if (run_on_device(q, k, v, cfg, /*chunk_size=*/0, state, out)) return out;
  return ref::causal_linear_attention_recurrent(q, k, v, cfg, state);  // its answer in double, or its error
}

Tensor3 causal_linear_attention_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const LinearAttentionConfig& cfg, std::size_t chunk_size,
                                        LinearAttentionState& state) {
  const char* fn = "causal_linear_attention_chunked";
  ref::validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  ref::validate_linear_attention_state(fn, state, q, v);
  require(chunk_size >= 1, fn, "chunk_size (", chunk_size, ") must be at least 1");
  detail::require_float_scale(fn, cfg.scale);
  const std::size_t chunk = std::min(chunk_size, q.shape()[1]);  // a chunk longer than the sequence is the sequence
  detail::require_shared_memory_fits(fn, device::linear_attention_shared_bytes(q.shape()[2], chunk), chunk_size,
                                     q.shape()[2]);
  Tensor3 out = Tensor3::from_shape({q.shape()[0], q.shape()[1], v.shape()[2]});
  if (run_on_device(q, k, v, cfg, chunk, state, out)) return out;
  return ref::causal_linear_attention_chunked(q, k, v, cfg, chunk_size, state);
}

}  // namespace tvlab::cuda

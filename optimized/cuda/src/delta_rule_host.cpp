// Host-tensor entry points of chapter 06's CUDA delta rule: validate (the reference's checks),
// upload, launch, download; the reference's answer or error where the device flags a fault.
// Compiled with or without nvcc.

#include "tvlab/cuda/delta_rule.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/delta_rule_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/ref/delta_rule.hpp"
#include "state_kernel_checks.hpp"

namespace tvlab::cuda {
namespace {

// The scale q is multiplied by: cfg's, or 1/sqrt(d_k) (fla's default).
double scale_of(const DeltaRuleConfig& cfg, std::size_t d_k) {
  return cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d_k)));
}

// The checks after the reference's: the scale as the device multiplies by it, and the shared
// memory of one thread block against the device's limit.
void check_device_limits(const char* fn, const Tensor3& q, const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                         std::size_t chunk_size, std::size_t chunk) {
  const std::size_t d_k = q.shape()[2];
  detail::require_float_scale(fn, scale_of(cfg, d_k));
  detail::require_shared_memory_fits(fn, device::delta_rule_shared_bytes(d_k, chunk, gate.per_channel.size() != 0),
                                     chunk_size, d_k);
}

// One pass on the device; false when it flagged a fault (a zero row to normalise, a value beyond
// float's range), the output then untouched.
bool run_on_device(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                   const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, std::size_t chunk_size,
                   const Tensor3& initial_state, DeltaRuleOutput& out) {
  const std::size_t h = q.shape()[0], n = q.shape()[1], d_k = q.shape()[2], d_v = v.shape()[2];
  DeviceBuffer<float> dq(q.data(), q.size()), dk(k.data(), k.size()), dv(v.data(), v.size());
  DeviceBuffer<float> dbeta(beta.data(), beta.size());
  const bool per_channel = gate.per_channel.size() != 0, scalar = gate.scalar.size() != 0;
  DeviceBuffer<float> dgate = per_channel ? DeviceBuffer<float>(gate.per_channel.data(), gate.per_channel.size())
                              : scalar    ? DeviceBuffer<float>(gate.scalar.data(), gate.scalar.size())
                                          : DeviceBuffer<float>();
  DeviceBuffer<float> q_rows(q.size()), k_rows(k.size()), state(h * d_k * d_v), dout(h * n * d_v);
  if (initial_state.size() != 0)
    state.upload(initial_state.data());
  else
    device::fill_bytes(state.get(), 0, state.size() * sizeof(float));
  const int no_fault = 0;
  DeviceBuffer<int> fault(&no_fault, 1);
  device::DeltaRuleArgs args;
  args.q = dq.get();
  args.k = dk.get();
  args.v = dv.get();
  args.beta = dbeta.get();
  args.gate = dgate.get();  // null without a gate
  args.per_channel_gate = per_channel;
  args.q_rows = q_rows.get();
  args.k_rows = k_rows.get();
  args.state = state.get();
  args.out = dout.get();
  args.fault = fault.get();
  args.heads = h;
  args.n = n;
  args.d_k = d_k;
  args.d_v = d_v;
  args.delta = cfg.delta;
  args.l2_normalize_qk = cfg.l2_normalize_qk;
  args.scale = static_cast<float>(scale_of(cfg, d_k));
  args.chunk_size = chunk_size;
  device::delta_rule(args);
  int flagged = 0;
  fault.download(&flagged);
  if (flagged != 0) return false;
  out.o = Tensor3::from_shape({h, n, d_v});
  out.state = Tensor3::from_shape({h, d_k, d_v});
  dout.download(out.o.data());
  state.download(out.state.data());
  return true;
}

}  // namespace

DeltaRuleOutput delta_rule_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                     const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                                     const Tensor3& initial_state) {
  const char* fn = "delta_rule_recurrent";
  ref::validate_delta_rule(fn, q, k, v, beta, gate, cfg, initial_state);
  check_device_limits(fn, q, gate, cfg, /*chunk_size=*/0, /*chunk=*/0);
  DeltaRuleOutput out;
  if (run_on_device(q, k, v, beta, gate, cfg, 0, initial_state, out)) return out;
  return ref::delta_rule_recurrent(q, k, v, beta, gate, cfg, initial_state);  // its answer in double, or its error
}

DeltaRuleOutput delta_rule_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                   const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, std::size_t chunk_size,
                                   const Tensor3& initial_state) {
  const char* fn = "delta_rule_chunked";
  require(chunk_size >= 1, fn, "chunk_size (", chunk_size, ") must be at least 1");
  ref::validate_delta_rule(fn, q, k, v, beta, gate, cfg, initial_state);
  const std::size_t chunk = std::min(chunk_size, q.shape()[1]);  // C > T is one chunk
  check_device_limits(fn, q, gate, cfg, chunk_size, chunk);
  DeltaRuleOutput out;
  if (run_on_device(q, k, v, beta, gate, cfg, chunk, initial_state, out)) return out;
  return ref::delta_rule_chunked(q, k, v, beta, gate, cfg, chunk_size, initial_state);
}

}  // namespace tvlab::cuda

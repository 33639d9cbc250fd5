// Host-tensor entry points of the CUDA attention: validate, upload, call the device entry
// points of attention_device.hpp, download. Compiled with or without nvcc.

#include <cstddef>
#include <optional>
#include <vector>

#include "attention_args.hpp"
#include "attention_run.hpp"
#include "rope_table.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/cuda/attention.hpp"
#include "tvlab/cuda/attention_device.hpp"
#include "tvlab/cuda/blas.hpp"
#include "tvlab/cuda/rope_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {

namespace detail {

Tensor3 run_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg, double scale,
                      const AttentionRope* rope) {
  const AttentionMask& mask = cfg.mask;
  auto args = attention_shapes<device::AttentionArgs>(q, k, v, scale, mask.causal);

  DeviceQkv<float> inputs(q, k, v);
  DeviceBuffer<float> dout(args.heads * args.seq_q * args.head_dim_v);
  DeviceBuffer<float> scores(args.heads * args.seq_q * args.seq_k);
  DeviceBuffer<unsigned char> allowed;
  DeviceBuffer<float> bias, slopes;
  if (mask.allowed) {
    std::vector<unsigned char> bytes(mask.allowed->begin(), mask.allowed->end());
    allowed = DeviceBuffer<unsigned char>(bytes.data(), bytes.size());
  }
  if (mask.bias) bias = DeviceBuffer<float>(mask.bias->data(), mask.bias->size());
  // Chapter 02: ALiBi slopes go to the softmax kernel; RoPE rotates the device copies of q and k
  // in place (the table covers the key positions; query i uses row seq_k - seq_q + i).
  if (mask.alibi_slopes) {
    const std::vector<float> m(mask.alibi_slopes->begin(), mask.alibi_slopes->end());
    slopes = DeviceBuffer<float>(m.data(), m.size());
  }
  std::optional<DeviceRopeTable> table;  // lives until the function returns, after every launch
  if (rope) {
    table.emplace("rope_attention", rope->freqs, rope->first_position, args.seq_k);
    const bool interleaved = rope->layout == RopeLayout::interleaved;
    const std::size_t query_row = args.seq_k - args.seq_q;
    device::apply_rope_inplace(inputs.q.get(), args.heads * args.seq_q, args.seq_q, args.head_dim, table->pairs,
                               table->cos_from(query_row), table->sin_from(query_row), interleaved);
    device::apply_rope_inplace(inputs.k.get(), args.heads * args.seq_k, args.seq_k, args.head_dim, table->pairs, table->cos_from(0),
                               table->sin_from(0), interleaved);
  }
  inputs.bind(args);
  args.out = dout.get();
  args.scores = scores.get();
  args.mask = allowed.get();
  args.additive_mask = bias.get();
  args.alibi_slopes = slopes.get();
  device::scaled_dot_product_attention(args);

  Tensor3 out = Tensor3::from_shape({args.heads, args.seq_q, args.head_dim_v});
  dout.download(out.data());
  return out;
}

}  // namespace detail

Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg) {
  const double scale = validate_attention("scaled_dot_product_attention", q, k, v, cfg);
  require_supported("scaled_dot_product_attention", cfg.mask, kAttentionMaskSupport);
  return detail::run_attention(q, k, v, cfg, scale, nullptr);
}

Tensor2 multi_head_attention(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w, int num_heads,
                             const AttentionConfig& cfg) {
  const std::size_t head_dim = validate_mha("multi_head_attention", x_q, x_kv, w, num_heads, cfg);
  const std::size_t heads = static_cast<std::size_t>(num_heads), inner = heads * head_dim;
  const std::size_t seq_q = x_q.shape()[0], seq_k = x_kv.shape()[0], d_model = x_q.shape()[1];

  // Projections as cuBLAS SGEMMs on the device; the head split / merge is a host reshuffle,
  // kept simple because this chapter's point is the attention core, not the layout.
  DeviceBuffer<float> dxq(x_q.data(), x_q.size()), dxkv(x_kv.data(), x_kv.size());
  auto project = [&](const DeviceBuffer<float>& x, const Tensor2& weight, std::size_t seq) {
    DeviceBuffer<float> dw(weight.data(), weight.size()), flat(seq * inner);
    device::sgemm(seq, inner, d_model, x.get(), dw.get(), false, flat.get());
    std::vector<float> host(seq * inner);
    flat.download(host.data());
    Tensor3 t = Tensor3::from_shape({heads, seq, head_dim});
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < seq; ++i)
        for (std::size_t d = 0; d < head_dim; ++d) t(h, i, d) = host[i * inner + h * head_dim + d];
    return t;
  };
  const Tensor3 heads_out =
      scaled_dot_product_attention(project(dxq, w.w_q, seq_q), project(dxkv, w.w_k, seq_k), project(dxkv, w.w_v, seq_k), cfg);
  std::vector<float> concat(seq_q * inner);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < seq_q; ++i)
      for (std::size_t d = 0; d < head_dim; ++d) concat[i * inner + h * head_dim + d] = heads_out(h, i, d);
  DeviceBuffer<float> dconcat(concat.data(), concat.size()), dwo(w.w_o.data(), w.w_o.size()), dy(seq_q * d_model);
  device::sgemm(seq_q, d_model, inner, dconcat.get(), dwo.get(), false, dy.get());
  Tensor2 y = Tensor2::from_shape({seq_q, d_model});
  dy.download(y.data());
  return y;
}

}  // namespace tvlab::cuda

#include "tvlab/analysis/attention_cost.hpp"

#include <cstdio>

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {

double bytes_per_element(DType dtype) {
  switch (dtype) {
    case DType::fp32: return 4;
    case DType::fp16:
    case DType::bf16: return 2;
    case DType::fp8:
    case DType::int8: return 1;
    case DType::int4: return 0.5;  // two 4-bit values per byte
  }
  fail("bytes_per_element", "dtype (", static_cast<int>(dtype), ") is not a tvlab::analysis::DType");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::fp32: return "fp32";
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::fp8: return "fp8";
    case DType::int8: return "int8";
    case DType::int4: return "int4";
  }
  fail("dtype_name", "dtype (", static_cast<int>(dtype), ") is not a tvlab::analysis::DType");
}

AttentionMatrixMemory attention_matrix_memory(long long seq, long long num_heads, long long attention_sublayers,
                                              DType dtype, int matrices_per_head) {
  const char* fn = "attention_matrix_memory";
  require_positive(fn, "seq", seq);
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "attention_sublayers", attention_sublayers);
  require(matrices_per_head == 1 || matrices_per_head == 2, fn, "matrices_per_head (", matrices_per_head,
          ") must be 1 (S or A) or 2 (S and A)");
  AttentionMatrixMemory m;
  m.elements_per_matrix = static_cast<double>(seq) * static_cast<double>(seq);
  m.bytes_per_head = matrices_per_head * m.elements_per_matrix * bytes_per_element(dtype);
  m.bytes_per_layer = m.bytes_per_head * static_cast<double>(num_heads);
  m.bytes_total = m.bytes_per_layer * static_cast<double>(attention_sublayers);
  return m;
}

LayerMacs layer_macs(long long seq, long long d_model, long long d_ff) {
  const char* fn = "layer_macs";
  require_positive(fn, "seq", seq);
  require_positive(fn, "d_model", d_model);
  require_positive(fn, "d_ff", d_ff);
  const double n = static_cast<double>(seq), d = static_cast<double>(d_model), f = static_cast<double>(d_ff);
  LayerMacs m;
  m.qkvo_projection = 4 * n * d * d;
  m.scores = n * n * d;
  m.weighted_values = n * n * d;
  m.ffn = 2 * n * d * f;
  return m;
}

LayerParams layer_params(long long d_model, long long d_ff) {
  require_positive("layer_params", "d_model", d_model);
  require_positive("layer_params", "d_ff", d_ff);
  const double d = static_cast<double>(d_model);
  return {4 * d * d, 2 * d * static_cast<double>(d_ff)};
}

double attention_params(long long d_model, long long num_heads, long long head_dim, bool output_projection) {
  const char* fn = "attention_params";
  require_positive(fn, "d_model", d_model);
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "head_dim", head_dim);
  const double d = static_cast<double>(d_model), inner = static_cast<double>(num_heads) * static_cast<double>(head_dim);
  // W_Q, W_K, W_V: [d, h d_k] each, and a bias of h d_k each.
  double params = 3 * (d * inner + inner);
  // W_O: [h d_k, d] and a bias of d.
  if (output_projection) params += inner * d + d;
  return params;
}

AttentionCoreWork attention_core_work(long long seq, long long num_heads, long long head_dim) {
  const char* fn = "attention_core_work";
  require_positive(fn, "seq", seq);
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "head_dim", head_dim);
  const double n = static_cast<double>(seq), h = static_cast<double>(num_heads);
  AttentionCoreWork w;
  // Per head: S = Q K^T is n x n dot products of length d_k, O = P V as many again.
  w.matmul_flops = h * 2 * (2 * n * n * static_cast<double>(head_dim));
  w.score_elements = h * n * n;
  w.exponentials = h * n * n;
  return w;
}

std::string format_bytes(double bytes) {
  static const char* decimal[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  static const char* binary[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double dec = bytes, bin = bytes;
  int i = 0, j = 0;
  while (dec >= 1000 && i < 5) dec /= 1000, ++i;
  while (bin >= 1024 && j < 5) bin /= 1024, ++j;
  char out[64];
  std::snprintf(out, sizeof out, "%.1f %s (%.1f %s)", dec, decimal[i], bin, binary[j]);
  return out;
}

}  // namespace tvlab::analysis

// The KV-cache calculators of chapter 05: elements per token, bytes, GPUs, tensor parallelism,
// activation memory.

#include "tvlab/analysis/kv_memory.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {

namespace {

// 2^63, the first whole number a long long cannot hold (exact as a double).
constexpr double kLongLongLimit = 9223372036854775808.0;

std::uint64_t times(const char* fn, std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  require(!__builtin_mul_overflow(a, b, &r), fn, "the count exceeds 64 bits (", a, " x ", b, ")");
  return r;
}
std::uint64_t plus(const char* fn, std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  require(!__builtin_add_overflow(a, b, &r), fn, "the count exceeds 64 bits (", a, " + ", b, ")");
  return r;
}

}  // namespace

DType dtype_from_torch_dtype(const std::string& torch_dtype) {
  if (torch_dtype == "float32" || torch_dtype == "fp32") return DType::fp32;
  if (torch_dtype == "float16" || torch_dtype == "fp16") return DType::fp16;
  if (torch_dtype == "bfloat16" || torch_dtype == "bf16") return DType::bf16;
  if (torch_dtype == "fp8" || torch_dtype == "float8_e4m3fn" || torch_dtype == "float8_e5m2") return DType::fp8;
  if (torch_dtype == "int8") return DType::int8;
  if (torch_dtype == "int4") return DType::int4;
  fail("dtype_from_torch_dtype", "torch_dtype (\"", torch_dtype,
       "\") is not one of float32, float16, bfloat16, fp8, int8, int4");
}

double gqa_kv_elements_per_token(long long num_heads, long long num_kv_heads, long long head_dim) {
  constexpr const char* fn = "gqa_kv_elements_per_token";
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "num_kv_heads", num_kv_heads);
  require_positive(fn, "head_dim", head_dim);
  require(num_heads % num_kv_heads == 0, fn, "num_heads (", num_heads, ") must be a multiple of num_kv_heads (",
          num_kv_heads, ")");
  // 2 g d_h: one key and one value vector per key-value head.
  return 2.0 * static_cast<double>(num_kv_heads) * static_cast<double>(head_dim);
}

double mla_kv_elements_per_token(long long kv_lora_rank, long long qk_rope_head_dim) {
  constexpr const char* fn = "mla_kv_elements_per_token";
  require_positive(fn, "kv_lora_rank", kv_lora_rank);
  require(qk_rope_head_dim >= 0, fn, "qk_rope_head_dim (", qk_rope_head_dim, ") must not be negative");
  // d_c + d_h^R: the latent c^KV serves K and V of every head; k^R is one vector shared by the heads.
  return static_cast<double>(kv_lora_rank) + static_cast<double>(qk_rope_head_dim);
}

double tpa_kv_elements_per_token(long long rank_k, long long rank_v, long long num_heads, long long head_dim) {
  constexpr const char* fn = "tpa_kv_elements_per_token";
  require_positive(fn, "rank_k", rank_k);
  require_positive(fn, "rank_v", rank_v);
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "head_dim", head_dim);
  // (R_K + R_V)(h + d_h): each rank-1 term a_r (x) b_r caches a in R^h and b in R^{d_h}.
  // Summed as doubles: the long long sums could overflow.
  return (static_cast<double>(rank_k) + static_cast<double>(rank_v)) *
         (static_cast<double>(num_heads) + static_cast<double>(head_dim));
}

double model_kv_elements_per_token(const ModelConfig& config) {
  validate_model_config("model_kv_elements_per_token", config);
  if (config.is_mla()) return mla_kv_elements_per_token(config.kv_lora_rank, config.qk_rope_head_dim);
  return gqa_kv_elements_per_token(config.num_attention_heads, config.num_key_value_heads, config.head_dim);
}

KvCacheSize kv_cache_size(double elements_per_token_per_layer, long long num_layers, long long seq_len,
                          long long batch, DType dtype) {
  constexpr const char* fn = "kv_cache_size";
  require(std::isfinite(elements_per_token_per_layer) && elements_per_token_per_layer > 0, fn,
          "elements_per_token_per_layer (", elements_per_token_per_layer, ") must be positive");
  require_positive(fn, "num_layers", num_layers);
  require_positive(fn, "seq_len", seq_len);
  require_positive(fn, "batch", batch);
  const double b = bytes_per_element(dtype);
  const double layers = static_cast<double>(num_layers), tokens = static_cast<double>(seq_len);
  KvCacheSize s;
  s.elements_per_token_per_layer = elements_per_token_per_layer;
  s.bytes_per_token_per_layer = elements_per_token_per_layer * b;     // e b
  s.bytes_per_token = s.bytes_per_token_per_layer * layers;           // e b L
  s.bytes_per_layer = s.bytes_per_token_per_layer * tokens;           // e b S
  s.bytes_per_sequence = s.bytes_per_token * tokens;                  // e b L S
  s.bytes_total = s.bytes_per_sequence * static_cast<double>(batch);  // e b L S B
  return s;
}

KvCacheSize kv_cache_size(const ModelConfig& config, long long seq_len, long long batch, DType dtype) {
  return kv_cache_size(model_kv_elements_per_token(config), config.num_hidden_layers, seq_len, batch, dtype);
}

double per_layer_gqa_kv_bytes(const std::vector<long long>& num_kv_heads_per_layer, long long num_heads,
                              long long head_dim, long long seq_len, long long batch, DType dtype) {
  constexpr const char* fn = "per_layer_gqa_kv_bytes";
  require(!num_kv_heads_per_layer.empty(), fn, "num_kv_heads_per_layer must not be empty (one entry per layer)");
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "head_dim", head_dim);
  require_positive(fn, "seq_len", seq_len);
  require_positive(fn, "batch", batch);
  // sum over layers of 2 g_l d_h, then x S B b.
  double elements = 0;
  for (std::size_t layer = 0; layer < num_kv_heads_per_layer.size(); ++layer) {
    const long long g = num_kv_heads_per_layer[layer];
    require(g > 0 && num_heads % g == 0, fn, "num_kv_heads_per_layer[", layer, "] (", g,
            ") must be a positive divisor of num_heads (", num_heads, ")");
    elements += 2.0 * static_cast<double>(g) * static_cast<double>(head_dim);
  }
  return elements * static_cast<double>(seq_len) * static_cast<double>(batch) * bytes_per_element(dtype);
}

long long gpus_needed(double kv_bytes, double weight_bytes, double gpu_bytes) {
  constexpr const char* fn = "gpus_needed";
  require(std::isfinite(kv_bytes) && kv_bytes > 0, fn, "kv_bytes (", kv_bytes, ") must be positive");
  require(std::isfinite(weight_bytes) && weight_bytes >= 0, fn, "weight_bytes (", weight_bytes,
          ") must not be negative");
  require(std::isfinite(gpu_bytes) && gpu_bytes > 0, fn, "gpu_bytes (", gpu_bytes, ") must be positive");
  const double gpus = std::ceil((kv_bytes + weight_bytes) / gpu_bytes);
  // Converting a double beyond long long's range is undefined behaviour: refuse such a count.
  require(gpus < kLongLongLimit, fn, "kv_bytes (", kv_bytes, ") and weight_bytes (", weight_bytes, ") need ", gpus,
          " GPUs of gpu_bytes (", gpu_bytes, "), more than a long long counts (2^63)");
  return static_cast<long long>(gpus);
}

long long sequences_that_fit(double bytes_per_sequence, double weight_bytes, long long num_gpus, double gpu_bytes) {
  constexpr const char* fn = "sequences_that_fit";
  require(std::isfinite(bytes_per_sequence) && bytes_per_sequence > 0, fn, "bytes_per_sequence (",
          bytes_per_sequence, ") must be positive");
  require(std::isfinite(weight_bytes) && weight_bytes >= 0, fn, "weight_bytes (", weight_bytes,
          ") must not be negative");
  require_positive(fn, "num_gpus", num_gpus);
  require(std::isfinite(gpu_bytes) && gpu_bytes > 0, fn, "gpu_bytes (", gpu_bytes, ") must be positive");
  const double free_bytes = static_cast<double>(num_gpus) * gpu_bytes - weight_bytes;
  if (free_bytes <= 0) return 0;
  const double sequences = std::floor(free_bytes / bytes_per_sequence);
  // As in gpus_needed: a count beyond long long's range is refused, not converted.
  require(sequences < kLongLongLimit, fn, "bytes_per_sequence (", bytes_per_sequence, ") fits ", sequences,
          " times in num_gpus (", num_gpus, ") x gpu_bytes (", gpu_bytes,
          ") less the weights, more than a long long counts (2^63)");
  return static_cast<long long>(sequences);
}

TensorParallelKv tensor_parallel_kv(long long num_heads, long long num_kv_heads, long long head_dim,
                                    long long tp_size) {
  constexpr const char* fn = "tensor_parallel_kv";
  // The shape checks of GQA first (h a multiple of g, all positive).
  gqa_kv_elements_per_token(num_heads, num_kv_heads, head_dim);
  require_positive(fn, "tp_size", tp_size);
  require(num_heads % tp_size == 0, fn, "num_heads (", num_heads, ") must be a multiple of tp_size (", tp_size,
          "): each GPU computes h / t query heads");
  TensorParallelKv out;
  out.query_heads_per_gpu = num_heads / tp_size;
  if (num_kv_heads >= tp_size) {
    require(num_kv_heads % tp_size == 0, fn, "num_kv_heads (", num_kv_heads, ") must be a multiple of tp_size (",
            tp_size, ") when it is at least tp_size");
    out.kv_heads_per_gpu = num_kv_heads / tp_size;  // each GPU owns g / t kv heads
    out.replicas = 1;
  } else {
    require(tp_size % num_kv_heads == 0, fn, "tp_size (", tp_size, ") must be a multiple of num_kv_heads (",
            num_kv_heads, ") when it exceeds it (each kv head is replicated on t / g GPUs)");
    out.kv_heads_per_gpu = 1;  // one kv head, the one its query heads use, copied on t / g GPUs
    out.replicas = tp_size / num_kv_heads;
  }
  out.elements_per_token_per_gpu = 2.0 * static_cast<double>(out.kv_heads_per_gpu) * static_cast<double>(head_dim);
  return out;
}

double gqa_kv_activation_saving(long long num_heads, long long num_kv_heads) {
  constexpr const char* fn = "gqa_kv_activation_saving";
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "num_kv_heads", num_kv_heads);
  require(num_heads % num_kv_heads == 0, fn, "num_heads (", num_heads, ") must be a multiple of num_kv_heads (",
          num_kv_heads, ")");
  // 1 - g / h
  return 1.0 - static_cast<double>(num_kv_heads) / static_cast<double>(num_heads);
}

double mla_kv_activation_saving(long long kv_lora_rank, long long num_heads, long long head_dim) {
  constexpr const char* fn = "mla_kv_activation_saving";
  require_positive(fn, "kv_lora_rank", kv_lora_rank);
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "head_dim", head_dim);
  const double full = static_cast<double>(num_heads) * static_cast<double>(head_dim);
  require(static_cast<double>(kv_lora_rank) <= full, fn, "kv_lora_rank (", kv_lora_rank,
          ") must not exceed num_heads x head_dim (", full, "): a latent wider than what it compresses saves nothing");
  // 1 - d_c / (h d_h)
  return 1.0 - static_cast<double>(kv_lora_rank) / full;
}

double layer_activation_bytes(long long seq_len, long long batch, long long hidden_size, long long num_heads,
                              bool checkpointed) {
  constexpr const char* fn = "layer_activation_bytes";
  require_positive(fn, "seq_len", seq_len);
  require_positive(fn, "batch", batch);
  require_positive(fn, "hidden_size", hidden_size);
  require_positive(fn, "num_heads", num_heads);
  const double s = static_cast<double>(seq_len), b = static_cast<double>(batch);
  const double h = static_cast<double>(hidden_size), a = static_cast<double>(num_heads);
  // Full checkpointing keeps the layer's 16-bit input only: 2 s b h.
  if (checkpointed) return 2.0 * s * b * h;
  // s b h (34 + 5 a s / h): 34 s b h for the linear parts and norms, 5 a s^2 b for the score
  // matrices (QK^T, softmax, its dropout mask and the dropout output).
  return s * b * h * (34.0 + 5.0 * a * s / h);
}

std::uint64_t decode_projection_macs(std::size_t p, std::size_t n, std::size_t d, const KvHeads& heads,
                                     std::size_t d_k, bool with_cache) {
  const char* fn = "decode_projection_macs";
  require_positive(fn, "prompt_length", p);
  require_positive(fn, "d_model", d);
  require_positive(fn, "head_dim", d_k);
  validate_kv_heads(fn, heads);
  const std::uint64_t h = static_cast<std::uint64_t>(heads.num_heads), g = static_cast<std::uint64_t>(heads.num_kv_heads);
  // One token through all four projections: 2 d d_k (h + g).
  const std::uint64_t per_token = times(fn, times(fn, times(fn, 2, d), d_k), h + g);
  if (with_cache) return times(fn, plus(fn, p, n), per_token);  // (p + n) 2 d d_k (h + g)
  // p 2 d d_k (h + g) + n 2 d h d_k + 2 d g d_k (n p + n (n + 1) / 2)
  const std::uint64_t prompt = times(fn, p, per_token);
  const std::uint64_t queries_and_outputs = times(fn, n, times(fn, times(fn, times(fn, 2, d), h), d_k));
  const std::uint64_t tokens_reprojected = plus(fn, times(fn, n, p), times(fn, n, plus(fn, n, 1)) / 2);
  const std::uint64_t keys_and_values = times(fn, times(fn, times(fn, times(fn, 2, d), g), d_k), tokens_reprojected);
  return plus(fn, plus(fn, prompt, queries_and_outputs), keys_and_values);
}

}  // namespace tvlab::analysis

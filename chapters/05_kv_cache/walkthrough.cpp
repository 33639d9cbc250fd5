// `tvlab 05_kv_cache` (alias `tvlab kv`): the KV cache. The default run prefills a prompt and
// decodes a few tokens through one seeded layer for MHA, GQA, MQA, MLA (naive and absorbed) and
// TPA, showing what each caches and that decoding with a cache gives the outputs of one causal
// pass; then it runs the registry's decode step. --step walks one decode step of one GQA group,
// --model/--config is the KV-memory calculator, --block-size the paged cache's waste over a seeded
// workload, --kv-quant a quantized cache's bytes and attention error on the demonstration layer,
// --markdown prints results.md.

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <numeric>
#include <sstream>

#include "../common/backend_run.hpp"
#include "../common/npy_load.hpp"
#include "../common/run_cost.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/analysis/gqa_uptraining.hpp"
#include "tvlab/analysis/kv_memory.hpp"
#include "tvlab/analysis/paged_waste.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/model_config.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/tpa_config.hpp"
#include "tvlab/ref/gqa_attention.hpp"
#include "tvlab/ref/kv_cache.hpp"
#include "tvlab/ref/mla.hpp"
#include "tvlab/ref/quantized_kv_attention.hpp"
#include "tvlab/ref/tpa.hpp"

namespace tvlab::cli {
namespace {

constexpr const char* kCommand = TVLAB_CHAPTER_NAME;
constexpr double kKiB = 1024.0, kMiB = kKiB * 1024.0, kGiB = kMiB * 1024.0;

struct Options : StandardOptions {
  // The demonstration layer.
  int d_model = 16, heads = 4, kv_heads = 2, head_dim = 4, prompt = 5, new_tokens = 3;
  // The calculator.
  std::string model, config, dtype;
  long long seq = 4096, batch = 1, gpus = 0;
  double gpu_memory = 80;
  // The paged cache's waste: blocks of block_size over requests whose prompt and output lengths are
  // uniform in [1, prompt_max] and [1, output_max] (ShareGPT-like by default), at most max_len tokens.
  long long block_size = 16, requests = 1000, max_len = 2048, prompt_max = 321, output_max = 675;
  // A quantized cache on the demonstration layer: int8, kivi, int4, fp8 or all.
  std::string kv_quant;
};

// ------------------------------------------------------------------------------ small helpers

Tensor2 rows_of(const Tensor2& x, std::size_t begin, std::size_t end) {
  return xt::view(x, xt::range(begin, end), xt::all());
}

// Projections of N(0, 1/fan_in): each keeps the scale of its input.
Tensor2 projection(Rng& rng, std::size_t rows, std::size_t cols) {
  return rng.normal_matrix(rows, cols, 0.0, 1.0 / std::sqrt(static_cast<double>(rows)));
}

GqaWeights random_gqa_layer(Rng& rng, std::size_t d_model, const KvHeads& heads, std::size_t head_dim) {
  const auto h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);
  GqaWeights w;
  w.w_q = projection(rng, d_model, h * head_dim);
  w.w_k = projection(rng, d_model, g * head_dim);
  w.w_v = projection(rng, d_model, g * head_dim);
  w.w_o = projection(rng, h * head_dim, d_model);
  return w;
}

MlaWeights random_mla_layer(Rng& rng, const MlaConfig& cfg) {
  const auto d = static_cast<std::size_t>(cfg.hidden_size), h = static_cast<std::size_t>(cfg.num_heads);
  const auto d_c = static_cast<std::size_t>(cfg.kv_lora_rank), d_h = static_cast<std::size_t>(cfg.qk_nope_head_dim);
  const auto d_r = static_cast<std::size_t>(cfg.qk_rope_head_dim), d_v = static_cast<std::size_t>(cfg.v_head_dim);
  MlaWeights w;  // no query compression: queries straight from the hidden state
  w.w_uq = projection(rng, d, h * d_h);
  w.w_qr = projection(rng, d, h * d_r);
  w.w_dkv = projection(rng, d, d_c);
  w.kv_norm = rng.normal_vector(d_c, 1.0, 0.2);
  w.w_kr = projection(rng, d, d_r);
  w.w_uk = projection(rng, d_c, h * d_h);
  w.w_uv = projection(rng, d_c, h * d_v);
  w.w_o = projection(rng, h * d_v, d);
  return w;
}

TpaWeights random_tpa_layer(Rng& rng, const TpaConfig& cfg) {
  const auto d = static_cast<std::size_t>(cfg.hidden_size), h = static_cast<std::size_t>(cfg.num_heads);
  const auto d_h = static_cast<std::size_t>(cfg.head_dim);
  auto factor_map = [&](int rank) {
    const auto r = static_cast<std::size_t>(rank);
    return TpaFactorMap{projection(rng, d, r * h), Tensor2{}, projection(rng, d, r * d_h)};
  };
  TpaWeights w{factor_map(cfg.q_rank), factor_map(cfg.k_rank), factor_map(cfg.v_rank), {}};
  w.w_o = projection(rng, h * d_h, d);
  return w;
}

// "1.34 GB (1.25 GiB)": the documents use both decimal and binary units.
std::string bytes_text(double bytes) {
  std::ostringstream s;
  if (bytes < 1e3) {
    s << fixed(bytes, bytes == std::floor(bytes) ? 0 : 1) << " B";
    return s.str();
  }
  if (bytes >= 1e21) return sci(bytes, 3) + " B";  // beyond exabytes: no unit helps
  const char* decimal[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
  const char* binary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int i = 0;
  double d = bytes / 1e3, b = bytes / kKiB;
  while (d >= 1e3 && i < 5) d /= 1e3, b /= kKiB, ++i;
  // Three significant digits: 1.34, 10.7, 168.
  auto three_digits = [](double v) { return fixed(v, v < 10 ? 2 : (v < 100 ? 1 : 0)); };
  s << three_digits(d) << ' ' << decimal[i] << " (" << three_digits(b) << ' ' << binary[i] << ")";
  return s.str();
}

// A count of GPUs or sequences: the calculators return long long, so a count beyond it (a huge
// --seq, a tiny --gpu-memory) is printed in scientific notation instead.
constexpr double kLargestCount = 9e18;
std::string large_count_text(double count, const std::function<long long()>& exact) {
  return count >= kLargestCount ? sci(count, 3) : std::to_string(exact());
}

std::string count_text(double n) {  // 32768 -> "32,768"
  std::string digits = fixed(n, 0), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// ------------------------------------------------------------------ the demonstration's variants

// One attention variant run through the chapter's loop: prefill, decode, compare.
struct VariantRun {
  std::string name;
  std::string cached;            // what a token leaves in the cache
  std::size_t floats_per_token;  // per layer
  std::size_t floats_after;      // after the prompt and the decoded tokens
  double max_difference;         // max |decoded outputs - one causal pass|
};

// Prefill the first `prompt` rows of x, decode the others one at a time, and compare the outputs
// with one causal pass over every row.
VariantRun run_gqa_variant(const std::string& name, const Tensor2& x, std::size_t prompt, const KvHeads& heads,
                           std::size_t head_dim, std::uint64_t seed) {
  Rng rng(seed);
  const std::size_t n = x.shape()[0];
  const GqaWeights w = random_gqa_layer(rng, x.shape()[1], heads, head_dim);
  ref::KvCache cache(heads, head_dim, n);
  Tensor2 decoded = xt::zeros<float>({n, x.shape()[1]});
  xt::view(decoded, xt::range(0, prompt), xt::all()) = ref::prefill(cache, rows_of(x, 0, prompt), w, heads).output;
  for (std::size_t i = prompt; i < n; ++i)
    xt::view(decoded, xt::range(i, i + 1), xt::all()) = ref::decode(cache, rows_of(x, i, i + 1), w, heads).output;
  AttentionConfig causal;
  causal.mask.causal = true;
  const Tensor2 full = ref::grouped_query_attention(x, x, w, heads, causal);
  const std::size_t per_token = 2 * static_cast<std::size_t>(heads.num_kv_heads) * head_dim;
  return {name, "K and V of " + std::to_string(heads.num_kv_heads) + " kv head(s): 2 g d_k", per_token,
          per_token * cache.length(), max_abs_difference(decoded, full)};
}

MlaConfig demo_mla_config(std::size_t d_model, std::size_t heads) {
  MlaConfig cfg;  // d_c = 8, d_h = 8, d_h^R = 4, d_v = 8
  cfg.hidden_size = static_cast<int>(d_model);
  cfg.num_heads = static_cast<int>(heads);
  return cfg;
}

TpaConfig demo_tpa_config(std::size_t d_model, std::size_t heads, std::size_t head_dim) {
  TpaConfig cfg;  // R_Q = 6, R_K = R_V = 2
  cfg.hidden_size = static_cast<int>(d_model);
  cfg.num_heads = static_cast<int>(heads);
  cfg.head_dim = static_cast<int>(head_dim + head_dim % 2);  // RoPE rotates pairs: an even width
  return cfg;
}

// Runs `layer(rows, cache)` over the prompt, then token by token, into one output matrix.
template <class Cache, class Layer>
Tensor2 prefill_then_decode(const Tensor2& x, std::size_t prompt, Cache& cache, Layer layer) {
  Tensor2 out = xt::zeros<float>(x.shape());
  xt::view(out, xt::range(0, prompt), xt::all()) = layer(rows_of(x, 0, prompt), cache);
  for (std::size_t i = prompt; i < x.shape()[0]; ++i)
    xt::view(out, xt::range(i, i + 1), xt::all()) = layer(rows_of(x, i, i + 1), cache);
  return out;
}

// MLA both ways, each path with its own cache, both compared with one causal pass of the naive path.
std::vector<VariantRun> run_mla_variants(const Tensor2& x, std::size_t prompt, std::size_t heads, std::uint64_t seed) {
  const MlaConfig cfg = demo_mla_config(x.shape()[1], heads);
  Rng rng(seed);
  const MlaWeights w = random_mla_layer(rng, cfg);
  MlaCache full_cache(cfg, MlaPath::naive);
  const Tensor2 full = ref::mla_naive(x, w, cfg, full_cache);
  std::vector<VariantRun> runs;
  for (const MlaPath path : {MlaPath::naive, MlaPath::absorbed}) {
    MlaCache cache(cfg, path);
    const Tensor2 decoded = prefill_then_decode(x, prompt, cache, [&](const Tensor2& rows, MlaCache& c) {
      return path == MlaPath::naive ? ref::mla_naive(rows, w, cfg, c) : ref::mla_absorbed(rows, w, cfg, c);
    });
    runs.push_back({"MLA, " + to_string(path),
                    path == MlaPath::naive ? "every head's [k^C; k^R] and v: n_h (d_h + d_h^R + d_v)"
                                           : "the latent c^KV and the shared k^R: d_c + d_h^R",
                    mla_cache_floats_per_token(cfg, path), cache.floats(), max_abs_difference(decoded, full)});
  }
  return runs;
}

VariantRun run_tpa_variant(const Tensor2& x, std::size_t prompt, std::size_t heads, std::size_t head_dim,
                           std::uint64_t seed) {
  const TpaConfig cfg = demo_tpa_config(x.shape()[1], heads, head_dim);
  Rng rng(seed);
  const TpaWeights w = random_tpa_layer(rng, cfg);
  TpaCache full_cache(cfg), cache(cfg);
  const Tensor2 full = ref::tensor_product_attention(x, w, cfg, full_cache);
  const Tensor2 decoded = prefill_then_decode(x, prompt, cache, [&](const Tensor2& rows, TpaCache& c) {
    return ref::tensor_product_attention(rows, w, cfg, c);
  });
  return {"TPA, R_K = R_V = 2", "the factors a (h) and b (d_h) of each rank: (R_K + R_V)(h + d_h)",
          tpa_cache_floats_per_token(cfg), cache.floats(), max_abs_difference(decoded, full)};
}

// The demonstration's sizes (the options).
struct Layer {
  std::size_t d_model, heads, kv_heads, head_dim, prompt, new_tokens;
  std::size_t tokens() const { return prompt + new_tokens; }
};

std::vector<VariantRun> run_variants(const Layer& l, std::uint64_t seed) {
  Rng rng(seed);
  const Tensor2 x = rng.normal_matrix(l.tokens(), l.d_model);
  const int h = static_cast<int>(l.heads), g = static_cast<int>(l.kv_heads);
  std::vector<VariantRun> runs = {
      run_gqa_variant("MHA (g = h = " + std::to_string(h) + ")", x, l.prompt, {h, h}, l.head_dim, seed + 1),
      run_gqa_variant("GQA (g = " + std::to_string(g) + ")", x, l.prompt, {h, g}, l.head_dim, seed + 1),
      run_gqa_variant("MQA (g = 1)", x, l.prompt, {h, 1}, l.head_dim, seed + 1)};
  for (auto& r : run_mla_variants(x, l.prompt, l.heads, seed + 2)) runs.push_back(std::move(r));
  runs.push_back(run_tpa_variant(x, l.prompt, l.heads, l.head_dim, seed + 3));
  return runs;
}

// A float32 layer over a few tokens: a few roundings of values of order 1.
constexpr double kIdentityTolerance = 1e-5;

void print_variants(const Layer& l, const std::vector<VariantRun>& runs) {
  std::cout << "The cache of one layer (float32, 4 bytes a value) and the central identity: the outputs of the "
            << l.new_tokens << " decoded tokens, each computed from the cache, equal rows " << l.prompt << " to "
            << l.tokens() - 1 << " of one causal pass over all " << l.tokens() << " tokens.\n\n";
  std::cout << std::left << std::setw(22) << "variant" << std::right << std::setw(14) << "values/token" << std::setw(14)
            << "bytes/token" << std::setw(22) << "values after " + std::to_string(l.tokens()) << std::setw(26)
            << "max |decode - causal|"
            << "  cached per token\n";
  for (const auto& r : runs)
    std::cout << std::left << std::setw(22) << r.name << std::right << std::setw(14) << r.floats_per_token
              << std::setw(14) << 4 * r.floats_per_token << std::setw(22) << r.floats_after << std::setw(26)
              << sci(r.max_difference, 2) << "  " << r.cached << '\n';
  const bool all_equal =
      std::all_of(runs.begin(), runs.end(), [](const VariantRun& r) { return r.max_difference <= kIdentityTolerance; });
  std::cout << (all_equal ? "\nEvery variant decodes exactly what one causal pass computes (within float rounding, "
                            "<= 1e-5): the cache changes the cost, not the result.\n"
                          : "\nA variant's decoded outputs differ from its causal pass by more than 1e-5.\n");
  // The cost the cache saves: the projections of the earlier tokens are not recomputed.
  const KvHeads gqa{static_cast<int>(l.heads), static_cast<int>(l.kv_heads)};
  const auto with = analysis::decode_projection_macs(l.prompt, l.new_tokens, l.d_model, gqa, l.head_dim, true);
  const auto without = analysis::decode_projection_macs(l.prompt, l.new_tokens, l.d_model, gqa, l.head_dim, false);
  std::cout << "Projection multiply-adds of the GQA layer for the prompt and the " << l.new_tokens
            << " new tokens: " << with << " with the cache, " << without
            << " without it (every step recomputing the keys and values of every earlier token).\n\n";
}

// -------------------------------------------------------------------- the registry's decode step

// The inputs of the registry's decode function: the GQA layer's cache after the run, one free
// slot after it (zero here; a correct decode never reads it), and the last token's queries.
struct DecodeInputs {
  Tensor2 q;                 // [h, d]
  Tensor3 k_cache, v_cache;  // [g, capacity, d]
  std::size_t length = 0;    // cached positions: capacity - 1
};

// q_t = x_p W_q^(t): the query of token p for head t, columns [t d_k, (t+1) d_k) of W_q, in double.
Tensor2 token_queries(const Tensor2& x, std::size_t p, const GqaWeights& w, const Layer& l) {
  Tensor2 q = xt::zeros<float>({l.heads, l.head_dim});
  for (std::size_t t = 0; t < l.heads; ++t)
    for (std::size_t e = 0; e < l.head_dim; ++e) {
      double sum = 0.0;
      for (std::size_t c = 0; c < l.d_model; ++c) sum += static_cast<double>(x(p, c)) * w.w_q(c, t * l.head_dim + e);
      q(t, e) = static_cast<float>(sum);
    }
  return q;
}

DecodeInputs make_decode_inputs(const Layer& l, std::uint64_t seed) {
  Rng rng(seed);
  const Tensor2 x = rng.normal_matrix(l.tokens(), l.d_model);  // the tokens of run_variants
  Rng weights_rng(seed + 1);
  const KvHeads heads{static_cast<int>(l.heads), static_cast<int>(l.kv_heads)};
  const GqaWeights w = random_gqa_layer(weights_rng, l.d_model, heads, l.head_dim);
  ref::KvCache cache(heads, l.head_dim, l.tokens());
  ref::prefill(cache, x, w, heads);
  DecodeInputs in;
  in.length = l.tokens();
  const std::size_t capacity = in.length + 1;
  in.k_cache = xt::zeros<float>({l.kv_heads, capacity, l.head_dim});
  in.v_cache = xt::zeros<float>({l.kv_heads, capacity, l.head_dim});
  xt::view(in.k_cache, xt::all(), xt::range(0, in.length), xt::all()) = cache.keys();
  xt::view(in.v_cache, xt::all(), xt::range(0, in.length), xt::all()) = cache.values();
  // q_t = x_last W_q^(t): the last token's query of head t, columns [t d, (t+1) d).
  in.q = token_queries(x, l.tokens() - 1, w, l);  // the last token's
  return in;
}

std::optional<Run> run_decode(const kv::Backend& b, const DecodeInputs& in) {
  if (!b.decode) return std::nullopt;
  const kv::DecodeAttention r = b.decode(in.q, in.k_cache, in.v_cache, in.length, std::nullopt);
  // A weighted average of values of order 1 after a reduction of `length` products: float roundings.
  const double tol = 1e-5 * std::max(1.0, static_cast<double>(xt::amax(xt::abs(in.v_cache))()));
  Run run;
  run.outputs.push_back({"decode", r.out, tol, "decode attention output"});
  run.outputs.push_back({"lse", r.lse, 1e-5, "log-sum-exp of the scores"});
  return run;
}

// ------------------------------------------------------------------------------------ --step

void step_through(const Layer& l, std::uint64_t seed) {
  Rng rng(seed);
  const Tensor2 x = rng.normal_matrix(l.tokens(), l.d_model);
  Rng weights_rng(seed + 1);
  const KvHeads heads{static_cast<int>(l.heads), static_cast<int>(l.kv_heads)};
  const GqaWeights w = random_gqa_layer(weights_rng, l.d_model, heads, l.head_dim);
  ref::KvCache cache(heads, l.head_dim, l.tokens());
  ref::prefill(cache, rows_of(x, 0, l.prompt), w, heads);
  const std::size_t p = l.prompt, d = l.head_dim, r = heads.group_size();
  std::cout << "One decode step of GQA, group 0: query heads 0.." << r - 1 << " share kv head 0 (h = " << l.heads
            << ", g = " << l.kv_heads << ", d_k = " << d << "). The cache holds the " << p
            << " prompt tokens; the new token is at position " << p << ".\n\n";
  print_step(std::cout, 1, "the new token x, [1, d_model]");
  print_matrix(std::cout, "x", rows_of(x, p, p + 1));
  // q_t = x W_q^(t), in double, for the group's heads.
  DTensor2 q = xt::zeros<double>({r, d});
  for (std::size_t t = 0; t < r; ++t)
    for (std::size_t e = 0; e < d; ++e)
      for (std::size_t c = 0; c < l.d_model; ++c) q(t, e) += static_cast<double>(x(p, c)) * w.w_q(c, t * d + e);
  print_step(std::cout, 2, "its query for each head t of the group: q_t = x W_q^(t), one row per head");
  print_matrix(std::cout, "q", q);
  ref::decode(cache, rows_of(x, p, p + 1), w, heads);  // projects k, v and appends them
  const std::size_t n = cache.length();
  DTensor2 keys = xt::zeros<double>({n, d}), values = xt::zeros<double>({n, d});
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t e = 0; e < d; ++e) keys(j, e) = cache.keys()(0, j, e), values(j, e) = cache.values()(0, j, e);
  print_step(std::cout, 3, "its key and value for kv head 0: k = x W_k^(0), v = x W_v^(0)");
  print_matrix(std::cout, "k", DTensor2(xt::view(keys, xt::range(n - 1, n), xt::all())));
  print_matrix(std::cout, "v", DTensor2(xt::view(values, xt::range(n - 1, n), xt::all())));
  print_step(std::cout, 4,
             "the append: kv head 0's cache grows from " + std::to_string(p) + " to " + std::to_string(n) + " rows");
  std::cout << "(the earlier rows are read from the cache, not recomputed: the last row is the new token's)\n";
  print_matrix(std::cout, "K cache", keys);
  print_matrix(std::cout, "V cache", values);
  // s_tj = q_t . k_j / sqrt(d_k): every query head of the group reads the same keys.
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  DTensor2 scores = xt::zeros<double>({r, n});
  for (std::size_t t = 0; t < r; ++t)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t e = 0; e < d; ++e) scores(t, j) += scale * q(t, e) * keys(j, e);
  print_step(std::cout, 5, "the scores s_tj = q_t . k_j / sqrt(d_k), one row per query head");
  print_matrix(std::cout, "S", scores);
  DTensor2 weights = xt::zeros<double>({r, n});
  for (std::size_t t = 0; t < r; ++t) {
    double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (std::size_t j = 0; j < n; ++j) m = std::max(m, scores(t, j));
    for (std::size_t j = 0; j < n; ++j) sum += weights(t, j) = std::exp(scores(t, j) - m);
    for (std::size_t j = 0; j < n; ++j) weights(t, j) /= sum;
  }
  print_step(std::cout, 6, "softmax over the positions: p_tj = exp(s_tj - m_t) / l_t");
  print_matrix(std::cout, "P", weights);
  DTensor2 out = xt::zeros<double>({r, d});
  for (std::size_t t = 0; t < r; ++t)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t e = 0; e < d; ++e) out(t, e) += weights(t, j) * values(j, e);
  print_step(std::cout, 7, "the output of each query head: o_t = sum_j p_tj v_j");
  print_matrix(std::cout, "o", out);
  // The same step through the registry's reference, over the whole cache (every group).
  const Tensor2 q_all = token_queries(x, p, w, l);
  const kv::DecodeAttention ref_step =
      reference_backend(kv::backends()).decode(q_all, cache.keys(), cache.values(), n, std::nullopt);
  double diff = 0.0;
  for (std::size_t t = 0; t < r; ++t)
    for (std::size_t e = 0; e < d; ++e) diff = std::max(diff, std::abs(ref_step.out(t, e) - out(t, e)));
  std::cout << "\nThe registry's ref decode over the same cache gives these rows too (max |difference| " << sci(diff, 2)
            << ")."
            << (l.kv_heads > 1
                    ? " The other " + std::to_string(l.kv_heads - 1) + " group(s) do the same with their own kv head."
                    : std::string(" With one kv head (MQA) this group is every head."))
            << " The layer's output is Concat_t(o_t) W_o.\n\n";
}

// ---------------------------------------------------------------------------- the calculator

analysis::DType parse_dtype(const std::string& text) {
  using analysis::DType;
  for (const DType t : {DType::fp32, DType::fp16, DType::bf16, DType::fp8, DType::int8, DType::int4})
    if (text == analysis::dtype_name(t)) return t;
  fail(kCommand, "--dtype (", text, ") must be one of fp32, fp16, bf16, fp8, int8, int4");
}

ModelConfig chosen_model(const Options& o) {
  require(o.model.empty() || o.config.empty(), kCommand, "--config: give --model or --config, not both");
  try {
    return o.config.empty() ? named_model_config(o.model) : read_model_config(o.config);
  } catch (const Error& e) {
    fail(kCommand, o.config.empty() ? "--model: " : "--config: ", e.what());
  }
}

std::string attention_kind(const ModelConfig& m) {
  if (m.is_mla()) return "MLA";
  if (m.num_key_value_heads == m.num_attention_heads) return "MHA";
  return m.num_key_value_heads == 1 ? "MQA" : "GQA";
}

void list_models() {
  std::cout << "Built-in models (--model NAME):\n";
  for (const ModelConfig& m : named_model_configs())
    std::cout << "  " << std::left << std::setw(18) << m.name << std::right << attention_kind(m) << ", "
              << m.num_hidden_layers << " layers, " << m.num_attention_heads << " heads, " << m.num_key_value_heads
              << " kv heads of " << m.head_dim << (m.is_mla() ? ", d_c = " + std::to_string(m.kv_lora_rank) : "")
              << "  (" << m.source << ")\n";
}

int run_calculator(const Options& o, const GlobalOptions& g) {
  if (o.model == "list") {
    list_models();
    return 0;
  }
  require_positive(kCommand, "--seq", o.seq);
  require_positive(kCommand, "--batch", o.batch);
  require(o.gpus >= 0, kCommand, "--gpus (", o.gpus, ") must be 0 (compute how many) or more");
  // In bytes (x 1e9) it must stay finite: 1e300 GB would overflow to inf.
  require(std::isfinite(o.gpu_memory * 1e9) && o.gpu_memory > 0, kCommand, "--gpu-memory (", o.gpu_memory,
          ") must be a positive number of GB, below 1.8e299");
  const ModelConfig m = chosen_model(o);
  analysis::DType dtype = analysis::DType::fp16;
  if (!o.dtype.empty())
    dtype = parse_dtype(o.dtype);
  else if (!m.torch_dtype.empty())
    dtype = analysis::dtype_from_torch_dtype(m.torch_dtype);
  const analysis::KvCacheSize s = analysis::kv_cache_size(m, o.seq, o.batch, dtype);
  const double gpu_bytes = o.gpu_memory * 1e9;
  const std::string values =
      m.is_mla() ? "d_c + d_h^R = " + std::to_string(m.kv_lora_rank) + " + " + std::to_string(m.qk_rope_head_dim)
                 : "2 g d_h = 2 x " + std::to_string(m.num_key_value_heads) + " x " + std::to_string(m.head_dim);
  if (g.format == "json") {
    std::cout << std::setprecision(17) << "{\"chapter\": \"" << TVLAB_CHAPTER_NAME << "\", \"model\": \"" << m.name
              << "\", \"seq\": " << o.seq << ", \"batch\": " << o.batch << ", \"dtype\": \""
              << analysis::dtype_name(dtype) << "\", \"bytes_per_token_per_layer\": " << s.bytes_per_token_per_layer
              << ", \"bytes_per_token\": " << s.bytes_per_token << ", \"bytes_per_sequence\": " << s.bytes_per_sequence
              << ", \"bytes_total\": " << s.bytes_total << ", \"gpus_needed\": " << std::ceil(s.bytes_total / gpu_bytes)
              << "}\n";
    return 0;
  }
  const std::string heads_text =
      m.is_mla() ? std::to_string(m.num_attention_heads) + " heads of " + std::to_string(m.head_dim) +
                       " sharing one latent of " + std::to_string(m.kv_lora_rank) + " and one RoPE key of " +
                       std::to_string(m.qk_rope_head_dim)
                 : std::to_string(m.num_attention_heads) + " query heads, " + std::to_string(m.num_key_value_heads) +
                       " kv heads of " + std::to_string(m.head_dim);
  std::cout << "KV cache of " << m.name << ": " << attention_kind(m) << ", " << m.num_hidden_layers << " layers, "
            << heads_text << "; " << o.seq << " tokens x batch " << o.batch << " in " << analysis::dtype_name(dtype)
            << " (" << analysis::bytes_per_element(dtype) << " bytes a value)\n";
  if (!m.source.empty()) std::cout << "  source: " << m.source << "\n";
  std::cout << "  values per token per layer   " << values << " = " << count_text(s.elements_per_token_per_layer)
            << "\n  bytes per token per layer    " << bytes_text(s.bytes_per_token_per_layer)
            << "\n  bytes per token              " << bytes_text(s.bytes_per_token) << "  (x " << m.num_hidden_layers
            << " layers)\n  one layer, one sequence      " << bytes_text(s.bytes_per_layer)
            << "\n  one sequence                 " << bytes_text(s.bytes_per_sequence) << "  (x " << o.seq
            << " tokens)\n  all " << o.batch << " sequence(s)" << std::string(o.batch < 10 ? 12 : 11, ' ')
            << bytes_text(s.bytes_total) << "\n";
  const std::string gpu_text =
      o.gpu_memory >= 1 && o.gpu_memory < 1e15 && o.gpu_memory == std::floor(o.gpu_memory) ? fixed(o.gpu_memory, 0)
                                                                                         : sci(o.gpu_memory, 3);
  std::cout << "  GPUs of " << gpu_text << " GB the cache alone needs: "
            << large_count_text(std::ceil(s.bytes_total / gpu_bytes),
                                [&] { return analysis::gpus_needed(s.bytes_total, 0, gpu_bytes); })
            << " (weights, activations not counted)\n";
  if (o.gpus > 0)
    std::cout << "  sequences of " << o.seq << " tokens whose caches fit on " << o.gpus << " GPU(s): "
              << large_count_text(
                     std::floor(static_cast<double>(o.gpus) * gpu_bytes / s.bytes_per_sequence),
                     [&] { return analysis::sequences_that_fit(s.bytes_per_sequence, 0, o.gpus, gpu_bytes); })
              << " (cache only)\n";
  // The same model with the other attentions: only the kv heads (or the latent) change.
  std::cout << "\nThe same model with other attention (" << o.seq << " tokens, batch " << o.batch << ", "
            << analysis::dtype_name(dtype) << "):\n";
  std::vector<std::pair<std::string, double>> rows;  // name, values per token per layer
  const long long h = m.num_attention_heads, d_h = m.head_dim;
  rows.emplace_back("MHA (g = " + std::to_string(h) + ")", analysis::gqa_kv_elements_per_token(h, h, d_h));
  if (!m.is_mla() && m.num_key_value_heads != h && m.num_key_value_heads != 1)
    rows.emplace_back("GQA (g = " + std::to_string(m.num_key_value_heads) + ")",
                      analysis::gqa_kv_elements_per_token(h, m.num_key_value_heads, d_h));
  else if (m.is_mla() || m.num_key_value_heads == h)
    for (const long long groups : {8LL})
      if (groups < h && h % groups == 0)
        rows.emplace_back("GQA (g = " + std::to_string(groups) + ")",
                          analysis::gqa_kv_elements_per_token(h, groups, d_h));
  rows.emplace_back("MQA (g = 1)", analysis::gqa_kv_elements_per_token(h, 1, d_h));
  if (m.is_mla())
    rows.emplace_back("MLA (d_c + d_h^R)", analysis::mla_kv_elements_per_token(m.kv_lora_rank, m.qk_rope_head_dim));
  std::cout << "  " << std::left << std::setw(20) << "attention" << std::right << std::setw(18) << "values/token/layer"
            << std::setw(28) << "one sequence" << std::setw(14) << "vs MHA"
            << "\n";
  const double mha = rows.front().second;
  for (const auto& [name, e] : rows) {
    const analysis::KvCacheSize r = analysis::kv_cache_size(e, m.num_hidden_layers, o.seq, o.batch, dtype);
    const bool self = e == s.elements_per_token_per_layer;
    std::cout << "  " << std::left << std::setw(20) << name << std::right << std::setw(18) << count_text(e)
              << std::setw(28) << bytes_text(r.bytes_per_sequence) << std::setw(14)
              << (e == mha ? std::string("1") : "1/" + fixed(mha / e, mha / e == std::floor(mha / e) ? 0 : 1))
              << (self ? "   <- this model" : "") << "\n";
  }
  return 0;
}

// --------------------------------------------------------------------------- the paged waste

int run_paged_waste(const Options& o, const GlobalOptions& g) {
  require_positive(kCommand, "--block-size", o.block_size);
  require_positive(kCommand, "--requests", o.requests);
  require_positive(kCommand, "--max-len", o.max_len);
  require_positive(kCommand, "--prompt-max", o.prompt_max);
  require_positive(kCommand, "--output-max", o.output_max);
  require(o.block_size <= o.max_len, kCommand, "--block-size (", o.block_size, ") must not exceed --max-len (",
          o.max_len, "): a request never fills more than one block of that size");
  // Compared without forming the sum, which could wrap around.
  require(o.prompt_max < o.max_len && o.output_max <= o.max_len - o.prompt_max, kCommand, "--max-len (", o.max_len,
          ") must hold the longest request, --prompt-max + --output-max = ",
          static_cast<double>(o.prompt_max) + static_cast<double>(o.output_max), " tokens");
  // The requests (two counts each), and every decode step of every request counted once.
  RunCost cost;
  cost.memory("the requests", {static_cast<std::uint64_t>(o.requests)}, sizeof(analysis::Request), "--requests")
      .work("the decode steps counted", {static_cast<std::uint64_t>(o.requests), static_cast<std::uint64_t>(o.output_max)},
            o.requests >= o.output_max ? "--requests" : "--output-max");
  cost.require_affordable(g, o);

  const auto b = static_cast<std::size_t>(o.block_size), max_len = static_cast<std::size_t>(o.max_len);
  const std::vector<analysis::Request> requests = analysis::sample_requests(
      {.num_requests = static_cast<std::size_t>(o.requests),
       .prompt = {.min = 1, .max = static_cast<std::size_t>(o.prompt_max)},
       .output = {.min = 1, .max = static_cast<std::size_t>(o.output_max)},
       .seed = g.seed});
  const analysis::KvWasteReport r = analysis::kv_waste(requests, max_len, b);
  // The estimate of paged_waste.hpp: (b - 1)/2 unused slots of the last block, against L.
  const double half_block = (static_cast<double>(b) - 1.0) / 2.0;
  const double estimate = half_block / (r.mean_length + half_block);
  if (g.format == "json") {
    std::cout << std::setprecision(17) << "{\"chapter\": \"" << TVLAB_CHAPTER_NAME << "\", \"block_size\": " << b
              << ", \"requests\": " << r.requests << ", \"max_len\": " << max_len << ", \"prompt_max\": "
              << o.prompt_max << ", \"output_max\": " << o.output_max << ", \"seed\": " << g.seed
              << ", \"mean_length\": " << r.mean_length << ", \"preallocated_waste\": " << r.preallocated_waste()
              << ", \"paged_waste\": " << r.paged_waste() << ", \"preallocated_waste_over_time\": "
              << r.preallocated_waste_over_time() << ", \"exact_waste_over_time\": " << r.exact_waste_over_time()
              << ", \"paged_waste_over_time\": " << r.paged_waste_over_time()
              << ", \"mean_last_block_waste\": " << r.mean_last_block_waste() << ", \"paged_waste_estimate\": " << estimate
              << "}\n";
    return 0;
  }
  auto percent = [](double fraction) { return fixed(100 * fraction, 1) + "%"; };
  std::cout << "KV cache slots reserved but not filled: " << r.requests << " requests (seed " << g.seed
            << "), prompts uniform in [1, " << o.prompt_max << "] and outputs in [1, " << o.output_max
            << "] tokens, at most --max-len " << max_len << " tokens a request; blocks of " << b
            << " tokens.\n  mean length L = prompt + output: " << fixed(r.mean_length, 1) << " tokens\n\n";
  const std::vector<std::vector<std::string>> rows = {
      {"reserve L_max = " + std::to_string(max_len), percent(r.preallocated_waste()),
       percent(r.preallocated_waste_over_time())},
      {"reserve exactly L (an oracle)", percent(0.0), percent(r.exact_waste_over_time())},
      {"paged, b = " + std::to_string(b), percent(r.paged_waste()), percent(r.paged_waste_over_time())}};
  std::cout << "  " << std::left << std::setw(32) << "scheme" << std::right << std::setw(20) << "waste at the end"
            << std::setw(31) << "waste over the decode steps" << "\n";
  for (const auto& row : rows)
    std::cout << "  " << std::left << std::setw(32) << row[0] << std::right << std::setw(20) << row[1]
              << std::setw(31) << row[2] << "\n";
  std::cout << "\nPaging wastes only the unused slots of each request's last block: " << fixed(r.mean_last_block_waste(), 2)
            << " on average (about (b - 1)/2 = " << fixed(half_block, 1) << "), so about (b - 1)/2 / (L + (b - 1)/2) = "
            << percent(estimate) << " of the slots it holds.\n";
  return 0;
}

// --------------------------------------------------------------------------- a quantized cache

// One of --kv-quant's formats: the specs of the keys and of the values for head dimension d.
struct QuantFormat {
  std::string name, what;
  KvQuantSpec key, value;
};

std::vector<QuantFormat> quant_formats(const std::string& selection, std::size_t d) {
  // INT4 in groups of gcd(d, 32) channels: 32 at the usual head dimensions, and a divisor of d always.
  const std::size_t int4_group = std::gcd(d, std::size_t{32});
  const std::vector<QuantFormat> all = {
      {"int8", "INT8, one symmetric scale per token and head", int8_per_token(d), int8_per_token(d)},
      {"kivi", "KIVI: INT8 keys per channel (groups of 32 tokens), values per token", int8_per_channel(32),
       int8_per_token(d)},
      {"int4", "INT4, asymmetric, one scale and minimum per " + std::to_string(int4_group) + " channels",
       int4_per_group(int4_group), int4_per_group(int4_group)},
      {"fp8", "FP8 E4M3, one scale per token and head", fp8_e4m3_per_token(d), fp8_e4m3_per_token(d)}};
  std::vector<QuantFormat> chosen;
  for (const QuantFormat& f : all)
    if (selection == "all" || selection == f.name) chosen.push_back(f);
  if (chosen.empty()) fail(kCommand, "--kv-quant (", selection, ") must be one of int8, kivi, int4, fp8, all");
  return chosen;
}

// The cache of the demonstration's GQA layer in each format: its bytes per token and layer, and the
// attention of the last token over it against the float cache's. Quantizing changes the keys and
// values by at most half a step, and the output by at most ref::quantized_kv_attention_error_bound.
int run_quantization(const Layer& l, const std::string& selection, const GlobalOptions& g) {
  const std::vector<QuantFormat> formats = quant_formats(selection, l.head_dim);
  const DecodeInputs in = make_decode_inputs(l, g.seed);
  const auto cached = [&in](const Tensor3& cache) -> Tensor3 {
    return xt::view(cache, xt::all(), xt::range(0, in.length), xt::all());
  };
  const Tensor3 k = cached(in.k_cache), v = cached(in.v_cache);
  const Tensor2 exact = ref::gqa_decode_attention(in.q, k, v, in.length).out;  // over the float cache
  const double float_bytes = 2.0 * static_cast<double>(l.kv_heads * l.head_dim) * sizeof(float);
  struct Row {
    const QuantFormat* format;
    double bytes, error, bound;
  };
  std::vector<Row> rows;
  for (const QuantFormat& f : formats) {
    const QuantizedKv kq = quantize_kv(k, f.key), vq = quantize_kv(v, f.value);
    const Tensor2 out = ref::quantized_kv_decode_attention(in.q, kq, vq);
    const Tensor2 bound = ref::quantized_kv_attention_error_bound(in.q, kq, vq);
    rows.push_back({&f, kv_bytes_per_token(f.key, l.kv_heads, l.head_dim) + kv_bytes_per_token(f.value, l.kv_heads, l.head_dim),
                    max_abs_difference(out, exact), static_cast<double>(xt::amax(bound)())});
  }
  if (g.format == "json") {
    std::cout << std::setprecision(17) << "{\"chapter\": \"" << TVLAB_CHAPTER_NAME << "\", \"heads\": " << l.heads
              << ", \"kv_heads\": " << l.kv_heads << ", \"head_dim\": " << l.head_dim << ", \"length\": " << in.length
              << ", \"seed\": " << g.seed << ", \"float32_bytes_per_token\": " << float_bytes << ", \"formats\": [";
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::cout << (i ? ", " : "") << "{\"name\": \"" << rows[i].format->name << "\", \"bytes_per_token\": "
                << rows[i].bytes << ", \"max_abs_error\": " << rows[i].error << ", \"error_bound\": " << rows[i].bound
                << "}";
    std::cout << "]}\n";
    return 0;
  }
  std::cout << "A quantized KV cache on the demonstration layer: GQA with " << l.heads << " query heads, " << l.kv_heads
            << " kv heads of d_k = " << l.head_dim << "; the last token attends over the " << in.length
            << " cached tokens (seed " << g.seed << "). Bytes per token and layer for K and V, codes and float32 "
               "scales (and minimums); the error is max |o - o_fp32| over the attention output, against the "
               "bound of ref::quantized_kv_attention_error_bound.\n\n";
  std::cout << "  " << std::left << std::setw(7) << "format" << std::right << std::setw(16) << "bytes/token"
            << std::setw(12) << "of fp32" << std::setw(14) << "max error" << std::setw(14) << "bound"
            << "  layout\n";
  std::cout << "  " << std::left << std::setw(7) << "fp32" << std::right << std::setw(16) << fixed(float_bytes, 0)
            << std::setw(12) << "1" << std::setw(14) << "0" << std::setw(14) << "0"
            << "  the float cache\n";
  for (const Row& r : rows)
    std::cout << "  " << std::left << std::setw(7) << r.format->name << std::right << std::setw(16)
              << fixed(r.bytes, r.bytes == std::floor(r.bytes) ? 0 : 1) << std::setw(12)
              << fixed(r.bytes / float_bytes, 3) << std::setw(14) << sci(r.error, 2) << std::setw(14)
              << sci(r.bound, 2) << "  " << r.format->what << "\n";
  std::cout << "\nAt this head dimension the scales are a large share of the bytes (one float per group); at d_k = "
               "128 INT8 per token stores 1 + 4/128 bytes a value instead of 4.\n";
  return 0;
}

// ---------------------------------------------------------------------- the documents' numbers

// Llama 2 70B's FP16 weights from its published shape (hidden 8192, FFN 28672, vocabulary 32000,
// 8 kv heads of 128, 80 layers): per layer W_Q and W_O (d x d), W_K and W_V (d x g d_h), the
// SwiGLU FFN (3 d d_ff) and two norms; then the embedding, the output head and the final norm.
double llama_2_70b_weight_bytes() {
  const double d = 8192, d_ff = 28672, vocab = 32000, kv = 8 * 128, layers = 80;
  const double per_layer = 2 * d * d + 2 * d * kv + 3 * d * d_ff + 2 * d;
  return 2.0 * (layers * per_layer + 2 * vocab * d + d);
}

std::vector<DocumentCheck> document_checks() {
  using namespace analysis;
  std::vector<DocumentCheck> c;
  // The documents' "LLaMA-2 70B": 80 layers, 64 heads of 128, each with its own K and V, FP16.
  auto mha_70b = [](long long seq) {
    return kv_cache_size(gqa_kv_elements_per_token(64, 64, 128), 80, seq, 1, DType::fp16);
  };
  auto grouped_70b = [](long long g) {
    return kv_cache_size(gqa_kv_elements_per_token(64, g, 128), 80, 4096, 1, DType::fp16);
  };
  const KvCacheSize mha = mha_70b(4096);
  c.push_back(check_number("000 L143", "one layer, h = 64, d_k = 128, 4096 tokens, FP16", "128 MB", 128, 1,
                           mha.bytes_per_layer / kMiB, bytes_text(mha.bytes_per_layer)));
  c.push_back(check_number("000 L145", "the same, 80 layers", "10 GB", 10, 1, mha.bytes_per_sequence / kGiB,
                           bytes_text(mha.bytes_per_sequence)));
  c.push_back(check_number("000 L145", "the same at 32K tokens", "80 GB", 80, 1,
                           mha_70b(32768).bytes_per_sequence / kGiB, bytes_text(mha_70b(32768).bytes_per_sequence)));
  c.push_back(check_number("000 L145", "the same at 128K tokens", "320 GB", 320, 1,
                           mha_70b(131072).bytes_per_sequence / kGiB, bytes_text(mha_70b(131072).bytes_per_sequence)));
  c.push_back(check_number("004 L49", "Llama-2 70B, 4096 tokens, FP16 (decimal GB)", "about 10.7 GB", 10.7, 0.1,
                           mha.bytes_per_sequence / 1e9, bytes_text(mha.bytes_per_sequence)));
  const KvCacheSize published = kv_cache_size(named_model_config("llama-2-70b"), 4096, 1, DType::fp16);
  c.push_back({"000 L143, 004 L49", "the published Llama 2 70B (8 kv heads), 4096 tokens, FP16",
               "10 GB (as if every head had its own K and V)",
               bytes_text(published.bytes_per_sequence) + ": the 10 GB is an MHA model of that shape", false});
  c.push_back(check_number("000 L145", "Llama 2 70B's FP16 weights", "about 140 GB", 140, 10,
                           llama_2_70b_weight_bytes() / 1e9, fixed(llama_2_70b_weight_bytes() / 1e9, 2) + " GB"));
  const long long mha_fit = sequences_that_fit(mha.bytes_per_sequence, llama_2_70b_weight_bytes(), 2);
  const long long published_fit = sequences_that_fit(published.bytes_per_sequence, llama_2_70b_weight_bytes(), 2);
  c.push_back(check_number(
      "000 L147", "4K MHA caches beside the weights on 2 x 80 GB", "about two", 2, 1, static_cast<double>(mha_fit),
      std::to_string(mha_fit) + " (" + std::to_string(published_fit) + " with the published 8 kv heads)"));
  const KvCacheSize mqa = grouped_70b(1);
  c.push_back(check_number(
      "000 L169", "MQA (g = 1): the 10 GB cache becomes", "about 160 MB, 1/64", 160, 10, mqa.bytes_per_sequence / kMiB,
      bytes_text(mqa.bytes_per_sequence) + ", 1/" + fixed(mha.bytes_per_sequence / mqa.bytes_per_sequence, 0)));
  c.push_back(check_number("004 L57", "MQA on a 64-head model: the cache shrinks by", "about 98%", 98, 1,
                           100 * (1 - mqa.bytes_per_sequence / mha.bytes_per_sequence),
                           fixed(100 * (1 - mqa.bytes_per_sequence / mha.bytes_per_sequence), 1) + "%"));
  const KvCacheSize gqa = grouped_70b(8);
  c.push_back(check_number(
      "000 L183", "GQA (g = 8): the 10 GB cache becomes", "1.25 GB, 8x", 1.25, 0.01, gqa.bytes_per_sequence / kGiB,
      bytes_text(gqa.bytes_per_sequence) + ", " + fixed(mha.bytes_per_sequence / gqa.bytes_per_sequence, 0) + "x"));
  const ModelConfig& v2 = named_model_config("deepseek-v2");
  const double v2_mha = gqa_kv_elements_per_token(v2.num_attention_heads, v2.num_attention_heads, v2.head_dim);
  const double v2_mla = model_kv_elements_per_token(v2);
  c.push_back(check_number("000 L197", "DeepSeek-V2 as MHA: 2 h d_h values a token and layer",
                           "32,768 values, about 64 KB", 32768, 1, v2_mha,
                           count_text(v2_mha) + " values, " + bytes_text(2 * v2_mha)));
  c.push_back({"000 L197", "DeepSeek-V2's MLA cache a token and layer, and the saving", "512 values, 64x",
               count_text(v2_mla) + " values (d_c + d_h^R = " + std::to_string(v2.kv_lora_rank) + " + " +
                   std::to_string(v2.qk_rope_head_dim) + "), " + fixed(v2_mha / v2_mla, 1) +
                   "x: the shared RoPE key is cached too",
               false});
  const ModelConfig& v3 = named_model_config("deepseek-v3");
  const double v3_ratio = gqa_kv_elements_per_token(v3.num_attention_heads, v3.num_attention_heads, v3.head_dim) /
                          model_kv_elements_per_token(v3);
  c.push_back(check_number("000 L207", "DeepSeek-V3's cache against an equal MHA", "about 1/57", 57, 1, v3_ratio,
                           "1/" + fixed(v3_ratio, 1)));
  const double factors = 2 * 1000.0 * 10;  // two 1000 x 10 matrices
  c.push_back(check_number("000 L217", "a 1000 x 1000 matrix as two 1000 x 10 factors", "20,000 values, 50x", 50, 1,
                           1e6 / factors, count_text(factors) + " values, " + fixed(1e6 / factors, 0) + "x"));
  // TPA against MHA on a 32-head layer of d_h = 128 (the document gives no shape; T6's default ranks are 2).
  const double mha_32 = gqa_kv_elements_per_token(32, 32, 128);
  const double tpa_saving = 1 - tpa_kv_elements_per_token(2, 2, 32, 128) / mha_32;
  c.push_back(
      check_number("000 L223", "TPA's saving, R_K = R_V = 2, h = 32, d_h = 128", "about 90%", 90, 10, 100 * tpa_saving,
                   fixed(100 * tpa_saving, 1) +
                       "% (rank 4: " + fixed(100 * (1 - tpa_kv_elements_per_token(4, 4, 32, 128) / mha_32), 1) + "%)"));
  const KvCacheSize million = kv_cache_size(gqa_kv_elements_per_token(32, 32, 128), 32, 1000000, 1, DType::bf16);
  c.push_back(check_number("004 L42", "32 layers, 32 heads of 128, BF16, a million tokens", "order of 512 GB", 512, 50,
                           million.bytes_total / 1e9, bytes_text(million.bytes_total)));
  c.push_back(check_number("004 L42", "80 GB GPUs that cache needs", "about 7", 7, 1,
                           static_cast<double>(gpus_needed(million.bytes_total)),
                           std::to_string(gpus_needed(million.bytes_total))));
  c.push_back({"004 L57 (Table 8-3)", "Llama 2 70B's groups", "g = h/4",
               "g = h/" + std::to_string(named_model_config("llama-2-70b").group_size()) + " (64 heads, 8 kv heads)",
               false});
  c.push_back(
      {"004 L57 (Table 8-3)", "Llama 3 405B's groups", "g = h/8",
       "g = h/" + std::to_string(named_model_config("llama-3.1-405b").group_size()) + " (128 heads, 8 kv heads)",
       false});
  c.push_back({"004 L57", "DeepSeek-V2's MLA bytes a token and layer (FP16), and the saving",
               "2 x 512 x 2 = 2,048 bytes, about 32x",
               bytes_text(v2_mla * 2) + ", " + fixed(v2_mha / v2_mla, 1) + "x: one latent for K and V, plus k^R",
               false});
  c.push_back(
      {"004 L57", "the cache the decoupled RoPE key adds a token and layer", "h x d_R = 8192 values",
       count_text(v2_mla - mla_kv_elements_per_token(v2.kv_lora_rank, 0)) + " values: one k^R shared by the heads",
       false});
  c.push_back({"004 L47 (Table 8-2)", "MLA's cache relative to MHA", "about 7%",
               fixed(100 * v2_mla / v2_mha, 2) + "% of an MHA with DeepSeek-V2's heads", false});
  c.push_back({"004 L57 (Figure 8-5)", "MLA's cache relative to MHA, as a formula", "d_c / (h d_k) = 1/32",
               "(d_c + d_h^R) / (2 h d_h) = 1/" + fixed(v2_mha / v2_mla, 1), false});
  const TensorParallelKv tp_mha = tensor_parallel_kv(64, 64, 128, 8), tp_gqa = tensor_parallel_kv(64, 8, 128, 8);
  const double tp_saving = 100 * (1 - tp_gqa.elements_per_token_per_gpu / tp_mha.elements_per_token_per_gpu);
  const double tp_saving_32 = 100 * (1 - tensor_parallel_kv(32, 8, 128, 8).elements_per_token_per_gpu /
                                             tensor_parallel_kv(32, 32, 128, 8).elements_per_token_per_gpu);
  c.push_back(check_number("004 L63", "KV per GPU, 8-way tensor parallel, GQA g = 8 vs MHA (h = 64)", "about 87% less",
                           87, 1, tp_saving, fixed(tp_saving, 1) + "% (" + fixed(tp_saving_32, 0) + "% for h = 32)"));
  const ModelConfig& llama3 = named_model_config("llama-3-8b");
  ModelConfig llama3_mha = llama3;
  llama3_mha.num_key_value_heads = llama3_mha.num_attention_heads;
  const double mha_fp16 = kv_cache_size(llama3_mha, 4096, 1, DType::fp16).bytes_total;
  const double gqa_int8 = kv_cache_size(llama3, 4096, 1, DType::int8).bytes_total;
  c.push_back(check_number("004 L63", "Llama 3 8B as MHA, FP16, 4K tokens", "2 GB", 2, 1, mha_fp16 / kGiB,
                           bytes_text(mha_fp16)));
  c.push_back({"004 L63", "Llama 3 8B, GQA + INT8, 4K tokens", "128 MB, 16x",
               bytes_text(gqa_int8) + ", " + fixed(mha_fp16 / gqa_int8, 0) + "x (" +
                   std::to_string(llama3.group_size()) + "x from the heads, " +
                   fixed(bytes_per_element(DType::fp16) / bytes_per_element(DType::int8), 0) +
                   "x from the bytes)",
               false});
  const KvCacheSize v3_int4 = kv_cache_size(v3, 1, 1, DType::int4);
  c.push_back({"004 L63", "DeepSeek-V3's latent d_c = 512 in INT4, a token", "about 512 bytes",
               fixed(mla_kv_elements_per_token(v3.kv_lora_rank, 0) * 0.5, 0) + " B a layer (" +
                   fixed(v3_int4.bytes_per_token_per_layer, 0) + " B with k^R), " +
                   count_text(v3_int4.bytes_per_token) + " B through " + std::to_string(v3.num_hidden_layers) +
                   " layers",
               false});
  c.push_back({"004 L63", "MLA's activation saving for DeepSeek-V2, 1 - d_c / (h d_k)", "about 60%",
               fixed(100 * mla_kv_activation_saving(v2.kv_lora_rank, v2.num_attention_heads, v2.head_dim), 1) +
                   "% by the document's own formula",
               false});
  // 05-C1: per new token and layer, 4 h d_h n FLOPs over 2 g d_h n b bytes.
  const double intensity_mha = 4.0 * 32 * 128 / (2.0 * 32 * 128 * 2),
               intensity_gqa = 4.0 * 32 * 128 / (2.0 * 8 * 128 * 2);
  c.push_back({"004 L42", "decode attention's FLOPs per cached byte (BF16)", "decoding is memory-bound",
               fixed(intensity_mha, 0) + " for MHA, " + fixed(intensity_gqa, 0) +
                   " for h/g = 4: far below the hundreds a GPU needs to be compute-bound",
               true});
  return c;
}

// ------------------------------------------------------------------------- results.md tables

std::string models_markdown() {
  std::vector<std::vector<std::string>> rows;
  for (const ModelConfig& m : named_model_configs()) {
    auto at = [&](long long seq) {
      return bytes_text(analysis::kv_cache_size(m, seq, 1, analysis::DType::bf16).bytes_per_sequence);
    };
    const analysis::KvCacheSize one = analysis::kv_cache_size(m, 1, 1, analysis::DType::bf16);
    rows.push_back({m.name, attention_kind(m), std::to_string(m.num_hidden_layers),
                    std::to_string(m.num_attention_heads) + " / " + std::to_string(m.num_key_value_heads),
                    std::to_string(m.head_dim), count_text(one.elements_per_token_per_layer),
                    bytes_text(one.bytes_per_token), at(4096), at(32768), at(131072)});
  }
  return markdown_table({"model", "attention", "layers", "heads / kv heads", "d_h", "values a token and layer",
                         "a token, all layers", "4K tokens", "32K tokens", "128K tokens"},
                        rows);
}

std::string uptraining_markdown() {
  const analysis::UptrainingExperiment e;
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : analysis::mean_pool_error(e, {0.0, 0.25, 0.5, 0.7, 0.9, 1.0}))
    rows.push_back({fixed(p.rho, 2), fixed(p.measured_cosine, 3), fixed(p.weight_error, 3), fixed(p.output_error, 3)});
  std::ostringstream md;
  md << "MHA layers (d = " << e.d_model << ", h = " << e.heads.num_heads << ", d_k = " << e.head_dim
     << ") whose key and value heads inside each group have similarity rho, mean-pooled into g = "
     << e.heads.num_kv_heads << " kv heads (Ainslie et al. 2023, section 2.1), before any uptraining; " << e.inputs
     << " causal inputs of " << e.seq << " tokens, seed " << e.seed << ".\n\n"
     << markdown_table({"rho", "measured cosine", "weight error", "output error (relative)"}, rows);
  return md.str();
}

std::string compressed_caches_markdown() {
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, cfg] :
       {std::pair{"DeepSeek-V2", deepseek_v2_mla()}, std::pair{"DeepSeek-V2-Lite", deepseek_v2_lite_mla()},
        std::pair{"DeepSeek-V3", deepseek_v3_mla()}}) {
    const double naive = static_cast<double>(mla_cache_floats_per_token(cfg, MlaPath::naive));
    const double absorbed = static_cast<double>(mla_cache_floats_per_token(cfg, MlaPath::absorbed));
    rows.push_back({std::string("MLA, ") + name, count_text(naive) + " (naive: every head's k and v)",
                    count_text(absorbed) + " (absorbed: c^KV and k^R)", fixed(naive / absorbed, 1) + "x"});
  }
  const double mha = analysis::gqa_kv_elements_per_token(32, 32, 128);
  for (const long long rank : {1LL, 2LL, 4LL}) {
    const double tpa = analysis::tpa_kv_elements_per_token(rank, rank, 32, 128);
    rows.push_back({"TPA, R_K = R_V = " + std::to_string(rank) + ", h = 32, d_h = 128",
                    count_text(mha) + " (MHA: 2 h d_h)", count_text(tpa) + " ((R_K + R_V)(h + d_h))",
                    fixed(mha / tpa, 1) + "x"});
  }
  return markdown_table({"layer", "values cached a token, uncompressed", "compressed", "saving"}, rows);
}

// ------------------------------------------------------------------------------- agreements

// The layer of results.md and the tour: the command's default sizes, seed 7.
const Layer kDocumentedLayer{16, 4, 2, 4, 5, 3};

// The registry's backends against the reference on the demonstration's inputs, and the chapter's
// identity for every variant: decoding with a cache equals one causal pass.
std::vector<Agreement> agreements(bool include_cuda) {
  std::vector<Agreement> out;
  const Layer& l = kDocumentedLayer;
  const std::string layer = "d_model 16, h = 4, d_k = 4, prompt 5 + 3 decoded";
  for (const VariantRun& r : run_variants(l, 7))
    out.push_back(
        {"prefill + decode = one causal pass", "ref", r.name + ", " + layer, r.max_difference, kIdentityTolerance});
  const DecodeInputs in = make_decode_inputs(l, 7);
  const Run expected = *run_decode(reference_backend(kv::backends()), in);
  for (const auto& b : kv::backends()) {
    if (b.kind == BackendKind::reference || b.kind == BackendKind::student || !b.decode) continue;
    if (b.kind == BackendKind::cuda && !include_cuda) continue;  // results.md must not depend on the machine
    const std::string example = "GQA h = 4, g = 2, d = 4, 8 of 9 slots";
    if (unavailable_reason(b.caps)) {
      out.push_back({"gqa_decode_attention", b.name, example, 0.0, 1e-5, true});
      continue;
    }
    for (const Agreement& a : agreements_of(b.name, example, *run_decode(b, in), expected)) out.push_back(a);
  }
  return out;
}

std::string markdown() {
  std::ostringstream md;
  md << results_header(TVLAB_CHAPTER_NAME, "Chapter 05: the KV cache");
  md << "## The documents' numbers\n\nEach computed with `tvlab/analysis/kv_memory.hpp` (the numbers "
        "`tests/05_kv_cache/kv_documents_test.cpp` checks; `notes_documents.md` explains each erratum). "
        "MB/GB are the documents' units: binary in 000, decimal in 004.\n\n"
     << checks_markdown(document_checks()) << '\n';
  md << "## The named models' KV cache\n\nBF16 (2 bytes a value), one sequence; MLA models cache "
        "d_c + d_h^R values a token and layer.\n\n"
     << models_markdown() << '\n';
  md << "## Mean-pooling MHA heads into GQA\n\n" << uptraining_markdown() << '\n';
  md << "## What MLA and TPA cache\n\nValues a token and layer.\n\n" << compressed_caches_markdown() << '\n';
  md << "## Decoding with the cache, and the registry\n\nThe chapter's identity for each variant (prefill, then "
        "decode token by token, against one causal pass), then the registry's decode backends against the "
        "reference on the GQA layer's cache: the headline optimized step and each of its versions (the CUDA kernels "
        "are compared by `tvlab tour` where a device is present).\n\n"
     << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// ---------------------------------------------------------------------------------- the run

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown();
    return 0;
  }
  // Four runs: the demonstration (with --kv-quant, its cache quantized), the calculator, the paged waste.
  const bool calculator = !o.model.empty() || !o.config.empty();
  const bool paged = o.given("--block-size"), quantized = o.given("--kv-quant");
  for (const char* option : {"--seq", "--batch", "--dtype", "--gpus", "--gpu-memory"})
    require(calculator || !o.given(option), kCommand, option,
            " belongs to the calculator: give --model or --config too");
  for (const char* option : {"--requests", "--max-len", "--prompt-max", "--output-max"})
    require(paged || !o.given(option), kCommand, option, " belongs to the paged waste: give --block-size too");
  const auto demonstration_options = {"--d-model", "--heads",   "--kv-heads", "--head-dim", "--prompt", "--new-tokens",
                                      "--step",    "--backend", "--dump",     "--load",     "--kv-quant"};
  if (calculator) {
    require(!paged, kCommand, "--block-size belongs to the paged waste, not to the calculator (--model, --config)");
    for (const char* option : demonstration_options)
      require(!o.given(option), kCommand, option,
              " belongs to the demonstration, not to the calculator (--model, --config)");
    return run_calculator(o, g);
  }
  if (paged) {
    for (const char* option : demonstration_options)
      require(!o.given(option), kCommand, option, " belongs to the demonstration, not to the paged waste (--block-size)");
    return run_paged_waste(o, g);
  }
  if (quantized) {
    for (const char* option : {"--step", "--backend", "--dump", "--load"})
      require(!o.given(option), kCommand, option, " belongs to the registry's decode step, not to --kv-quant");
    quant_formats(o.kv_quant, 2);  // the format's name, checked before anything runs
  }

  // --load: the registry's inputs from q.npy [h, d], k_cache.npy and v_cache.npy [g, capacity, d]
  // (the headers first: the run is costed before the values are read).
  const Load load(o.load);
  int heads = o.heads, kv_heads = o.kv_heads, head_dim = o.head_dim;
  std::size_t capacity = 0;
  if (load.enabled()) {
    const auto q_shape = load.shape("q", 2, "[heads, head_dim]");
    heads = size_from_load(o, "--heads", o.heads, q_shape[0], "q.npy's dimension 0 (heads)");
    head_dim = size_from_load(o, "--head-dim", o.head_dim, q_shape[1], "q.npy's dimension 1 (head_dim)");
    const auto k_shape = load.shape("k_cache", 3, "[kv_heads, capacity, head_dim]");
    kv_heads = size_from_load(o, "--kv-heads", o.kv_heads, k_shape[0], "k_cache.npy's dimension 0 (kv_heads)");
    capacity = k_shape[1];
    require(capacity >= 2, kCommand, "--load: k_cache.npy's capacity (", capacity,
            ") must be at least 2: the cached positions and one free slot");
  }
  require_positive(kCommand, "--d-model", o.d_model);
  require_positive(kCommand, "--heads", heads);
  require_positive(kCommand, "--kv-heads", kv_heads);
  require(heads % kv_heads == 0, kCommand, "--kv-heads (", kv_heads, ") must divide --heads (", heads, ")");
  require_positive(kCommand, "--head-dim", head_dim);
  require_positive(kCommand, "--prompt", o.prompt);
  require(o.new_tokens >= 0, kCommand, "--new-tokens (", o.new_tokens, ") must be 0 or more");
  require(!o.step || o.new_tokens >= 1, kCommand, "--new-tokens (", o.new_tokens,
          ") must be at least 1 with --step: the step walks the first decoded token");
  const Layer l{static_cast<std::size_t>(o.d_model), static_cast<std::size_t>(heads),
                static_cast<std::size_t>(kv_heads),  static_cast<std::size_t>(head_dim),
                static_cast<std::size_t>(o.prompt),  static_cast<std::size_t>(o.new_tokens)};
  // What the run will take, before anything is allocated: the caches and weights of the variants
  // (at most h heads of d_k, MLA's naive cache n_h (d_h + d_h^R + d_v)), and the loop references'
  // attention work: each of n tokens against up to n cached ones, for about 8 passes.
  // Each part names the option that makes it large: the longer of prompt and new tokens, the
  // wider of the model and the heads.
  const std::uint64_t n = l.tokens(), width = l.heads * std::max<std::size_t>(l.head_dim, 20);
  const std::string tokens_option = l.new_tokens > l.prompt ? "--new-tokens" : "--prompt";
  const std::string width_option = l.heads >= l.head_dim ? "--heads" : "--head-dim";
  const std::string weights_option = l.d_model >= width ? "--d-model" : width_option;
  RunCost cost;
  cost.memory("the variants' caches and outputs", {16, n, width}, sizeof(float),
              n >= width ? tokens_option : width_option)
      .memory("the variants' weights", {16, l.d_model, width}, sizeof(float), weights_option)
      .work("the variants' attention over the cache", {8, n, n, width}, tokens_option)
      .work("the variants' projections", {8, n, l.d_model, width}, l.d_model >= n ? "--d-model" : tokens_option);
  cost.require_affordable(g, o);
  if (quantized) return run_quantization(l, o.kv_quant, g);

  if (g.format != "json") {  // JSON is the registry's report alone
    std::cout << "KV cache: a layer of d_model " << l.d_model << " with " << l.heads << " query heads of " << l.head_dim
              << "; a prompt of " << l.prompt << " tokens prefilled, then " << l.new_tokens
              << " decoded one at a time (seed " << g.seed << ").\n\n";
    print_variants(l, run_variants(l, g.seed));
  }
  DecodeInputs in;
  if (load.enabled()) {
    in.q = load.tensor2("q", {l.heads, l.head_dim}, "[heads, head_dim]");
    in.k_cache = load.tensor3("k_cache", {l.kv_heads, capacity, l.head_dim}, "[kv_heads, capacity, head_dim]");
    in.v_cache = load.tensor3("v_cache", {l.kv_heads, capacity, l.head_dim},
                              "[kv_heads, capacity, head_dim] (those of k_cache.npy)");
    in.length = capacity - 1;
  } else {
    in = make_decode_inputs(l, g.seed);
  }
  const Run expected = *run_decode(reference_backend(kv::backends()), in);  // validates the inputs first
  if (o.step) step_through(l, g.seed);
  Dump dump(o.dump);
  dump.write("q", in.q);
  dump.write("k_cache", in.k_cache);
  dump.write("v_cache", in.v_cache);
  const RunReport report{TVLAB_CHAPTER_NAME,
                         g.seed,
                         "gqa_decode_attention: the last token's " + std::to_string(l.heads) + " query heads over " +
                             std::to_string(in.length) + " cached positions of " + std::to_string(l.kv_heads) +
                             " kv heads (capacity " + std::to_string(in.k_cache.shape()[1]) + "), head_dim " +
                             std::to_string(l.head_dim),
                         {{"heads", l.heads},
                          {"kv_heads", l.kv_heads},
                          {"head_dim", l.head_dim},
                          {"length", in.length},
                          {"capacity", in.k_cache.shape()[1]}},
                         g.format == "json"};
  return run_backends(
      kv::backends(), o.backend, [&](const kv::Backend& b) { return run_decode(b, in); }, expected, dump, report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "kv";
  c.summary = "the KV cache: prefill and decode, MHA/GQA/MQA, MLA, TPA, and a KV-memory calculator for real models";
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub =
        add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "kv", "Chapter 05: the KV cache", *o,
                            "walk one decode step of one GQA group (q, k, v, the append, scores, softmax, output)",
                            "write q.npy, k_cache.npy, v_cache.npy and decode_<backend>.npy, lse_<backend>.npy to DIR",
                            backend_lines(kv::backends()), [o, &global] { return run(*o, global); });
    sub.option("--d-model", o->d_model, "width of the demonstration layer");
    sub.option("--heads", o->heads, "query heads h");
    sub.option("--kv-heads", o->kv_heads, "key/value heads g of the GQA variant (divides h)");
    sub.option("--head-dim", o->head_dim, "head dimension d_k");
    sub.option("--prompt", o->prompt, "prompt tokens prefilled");
    sub.option("--new-tokens", o->new_tokens, "tokens decoded one at a time after the prompt");
    sub.option("--model", o->model, "calculator: a built-in model's KV cache (list: the names)", ShowDefault::no);
    sub.option("--config", o->config, "calculator: a Hugging Face config.json", ShowDefault::no);
    sub.option("--seq", o->seq, "calculator: tokens per sequence");
    sub.option("--batch", o->batch, "calculator: sequences");
    sub.option("--dtype", o->dtype, "calculator: fp32|fp16|bf16|fp8|int8|int4 (default: the config's, else fp16)",
               ShowDefault::no);
    sub.option("--gpus", o->gpus, "calculator: GPUs available (0: say how many the cache needs)");
    sub.option("--gpu-memory", o->gpu_memory, "calculator: GB of memory per GPU");
    sub.option("--block-size", o->block_size,
               "paged waste: tokens per block; the KV slots a seeded workload reserves but does not fill, paged "
               "against reserving --max-len");
    sub.option("--requests", o->requests, "paged waste: requests of the workload");
    sub.option("--max-len", o->max_len, "paged waste: the most tokens a request may hold (what preallocation reserves)");
    sub.option("--prompt-max", o->prompt_max, "paged waste: prompt lengths uniform in [1, this]");
    sub.option("--output-max", o->output_max, "paged waste: output lengths uniform in [1, this]");
    sub.option("--kv-quant", o->kv_quant,
               "int8|kivi|int4|fp8|all: the demonstration layer's cache quantized: bytes per token and the attention "
               "error against float32",
               ShowDefault::no);
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

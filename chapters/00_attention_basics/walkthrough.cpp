// `tvlab 00_attention_basics` (alias `tvlab attention`): scaled dot-product attention step by step,
// the cost of the n x n matrix, and why the scores are divided by sqrt(d_k).

#include <omp.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <tuple>

#include "../common/svg.hpp"
#include "../common/backend_run.hpp"
#include "../common/mask_options.hpp"
#include "../common/npy_load.hpp"
#include "../common/run_cost.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/analysis/attention_cost.hpp"
#include "tvlab/analysis/scaling.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/cuda/attention.hpp"
#include "tvlab/cuda/softmax.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/softmax.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/softmax.hpp"

namespace tvlab::cli {
namespace {

using analysis::DType;

struct Options : StandardOptions {
  MaskOptions mask;
  std::string svg;
  int heads = 2, seq = 6, seq_k = 0, head_dim = 4;
};

// ------------------------------------------------------------------------------ the documents

std::vector<DocumentCheck> document_checks() {
  std::vector<DocumentCheck> c;
  const auto one_head = analysis::attention_matrix_memory(8192, 1, 1, DType::fp16);
  c.push_back(check_number("000 L13", "elements of S (and of A), n = 8192", "67,108,864", 67108864, 1,
                           one_head.elements_per_matrix, fixed(one_head.elements_per_matrix, 0)));
  c.push_back(check_number("000 L13", "S and A in fp16 for ONE HEAD (the document says one layer)", "268 MB", 268, 1,
                           one_head.bytes_per_head / 1e6, analysis::format_bytes(one_head.bytes_per_head)));
  const auto gpt3_layer = analysis::attention_matrix_memory(8192, 96, 1, DType::fp16);
  c.push_back(check_number("000 L13", "S and A for one GPT-3 layer (96 heads)", "268 MB (\"one layer\")", 268, 1,
                           gpt3_layer.bytes_per_layer / 1e6, analysis::format_bytes(gpt3_layer.bytes_per_layer)));
  const auto enc_dec = analysis::attention_matrix_memory(8192, 1, 18, DType::fp16);
  c.push_back(check_number("000 L13", "encoder-decoder, 6+6 layers: 18 attention blocks (self, self, cross), one head",
                           "268 x 6 x 2 = 3.2 GB", 3.2, 0.1, enc_dec.bytes_total / 1e9,
                           analysis::format_bytes(enc_dec.bytes_total)));
  const auto gpt3 = analysis::attention_matrix_memory(8192, 1, 96, DType::fp16);
  c.push_back(check_number("000 L13", "S and A over 96 layers, one head", "268 x 96 = 25.1 GB", 25.1, 0.1,
                           gpt3.bytes_total / 1e9, analysis::format_bytes(gpt3.bytes_total)));
  const auto one_matrix = analysis::attention_matrix_memory(8192, 1, 1, DType::fp16, 1);
  c.push_back(check_number("000 L47", "one n x n matrix in fp16", "134 MB", 134, 1, one_matrix.bytes_per_head / 1e6,
                           analysis::format_bytes(one_matrix.bytes_per_head)));
  c.push_back(check_number("000 L47", "S and A over 96 layers (storage, one head)", "about 26 GB", 26, 1,
                           gpt3.bytes_total / 1e9, analysis::format_bytes(gpt3.bytes_total)));
  const auto fp32 = analysis::attention_matrix_memory(8192, 1, 1, DType::fp32, 1);
  c.push_back(check_number("003 §3.1", "one n x n float32 matrix, n = 8192 (one head)", "about 268 MB", 268, 1,
                           fp32.bytes_per_head / 1e6, analysis::format_bytes(fp32.bytes_per_head)));

  const auto macs = analysis::layer_macs(2048, 12288, 49152);
  c.push_back(check_number("000 L11", "work to form S: n^2 d MACs (n = 8192, d = 4096)", "n^2 operations",
                           8192.0 * 8192, 1, 8192.0 * 8192 * 4096, sci(8192.0 * 8192 * 4096) + " MACs"));
  c.push_back(check_number("000 L235", "GPT-3 FFN, one layer, n = 2048 (FLOPs = 2 x MACs)", "2.5e12 FLOPs", 2.5e12,
                           0.1e12, 2 * macs.ffn, sci(2 * macs.ffn) + " FLOPs (" + sci(macs.ffn) + " MACs)"));
  c.push_back(check_number("000 L235", "GPT-3 FFN, 96 layers", "2.4e14 FLOPs", 2.4e14, 0.1e14, 96 * 2 * macs.ffn,
                           sci(96 * 2 * macs.ffn) + " FLOPs (" + sci(96 * macs.ffn) + " MACs)"));
  c.push_back(check_number("000 L235", "GPT-3 attention, one layer: 4nd^2 + 2n^2 d MACs", "1.2e12 FLOPs", 1.2e12,
                           0.1e12, 2 * macs.attention(),
                           sci(2 * macs.attention()) + " FLOPs (" + sci(macs.attention()) + " MACs)"));
  c.push_back(check_number("000 L235", "GPT-3 attention, 96 layers", "1.2e14 FLOPs", 1.2e14, 0.1e14,
                           96 * 2 * macs.attention(), sci(96 * 2 * macs.attention()) + " FLOPs"));
  c.push_back(check_number("000 L235", "FFN share of the layer's compute", "about 67%", 67, 1, 100 * macs.ffn_share(),
                           fixed(100 * macs.ffn_share(), 1) + "%"));
  const auto params = analysis::layer_params(12288, 49152);
  c.push_back(check_number("000 L233", "FFN parameters per layer", "about 1.2B", 1.2, 0.1, params.ffn / 1e9,
                           fixed(params.ffn / 1e9, 3) + "B"));
  c.push_back(check_number("000 L233", "FFN parameters, 96 layers", "about 115B", 115, 1, 96 * params.ffn / 1e9,
                           fixed(96 * params.ffn / 1e9, 2) + "B"));
  c.push_back(check_number("000 L233", "FFN share of GPT-3's 175B parameters", "about 66%", 66, 1,
                           100 * 96 * params.ffn / 175e9, fixed(100 * 96 * params.ffn / 175e9, 1) + "%"));
  c.push_back(check_number("000 L233", "attention share of the 175B parameters (4d^2 per layer)", "about 34%", 34, 1,
                           100 * 96 * params.attention / 175e9, fixed(100 * 96 * params.attention / 175e9, 1) + "%"));
  c.push_back(check_number("000 L155", "extra parameters of multi-head over one head (d_k = d/h)", "adds parameters",
                           1, 0.5, 0, "0 (4 d^2 for any h)"));
  // 003 §2.3 compares multi-head attention with one head of the same d_model (the 2017 shape:
  // d = 512, h = 8, d_k = 64); like for like, both have W_Q, W_K, W_V and W_O.
  const double multi = analysis::attention_params(512, 8, 64, true), one = analysis::attention_params(512, 1, 512, true);
  c.push_back({"003 §2.3", "extra parameters of multi-head (h = 8, d_k = 64) over one head (d_k = 512), d = 512",
               "\"not large\"", fixed(multi - one, 0) + " (" + fixed(multi, 0) + " each)", multi == one});
  const auto var = analysis::dot_product_scaling(64, 2000, 16, 2024);
  c.push_back(check_number("003 §2.2", "Var(q . k) for d_k = 64, then after / sqrt(d_k)", "d_k, then about 1", 1, 0.1,
                           var.var_scaled, fixed(var.var_unscaled, 2) + ", then " + fixed(var.var_scaled, 3)));
  return c;
}

// ------------------------------------------------------------------------------------ agreement

// results.md must not depend on the machine, so --markdown passes include_cuda = false; the
// tour adds CUDA when a device is present.
std::vector<Agreement> agreements(bool include_cuda) {
  std::vector<Agreement> out;
  struct Example {
    std::string name;
    std::size_t heads, seq_q, seq_k, head_dim;
    bool causal;
  };
  const Example examples[] = {{"2 heads, n = 6, d = 4", 2, 6, 6, 4, false},
                              {"4 heads, n = 129, d = 64, causal", 4, 129, 129, 64, true},
                              {"8 heads, n = 512, d = 64", 8, 512, 512, 64, false}};
  for (const auto& e : examples) {
    Rng rng(7);
    const Tensor3 q = rng.normal_tensor(e.heads, e.seq_q, e.head_dim), k = rng.normal_tensor(e.heads, e.seq_k, e.head_dim),
                  v = rng.normal_tensor(e.heads, e.seq_k, e.head_dim);
    AttentionConfig cfg;
    cfg.mask.causal = e.causal;
    const Tensor3 expected = ref::scaled_dot_product_attention(q, k, v, cfg);
    const Tensor2 logits = xt::view(q, 0, xt::all(), xt::all()) * 3.0f;
    const Tensor2 expected_softmax = ref::softmax(logits);
    // Float attention vs the double-accumulating reference, as in the tests: rtol = 10 eps sqrt(K)
    // for K = max(n, d), times max|v| (about 4 for these N(0, 1) draws) and 2 for the score error.
    const double tol = 10 * 1.2e-7 * std::sqrt(static_cast<double>(std::max(e.seq_k, e.head_dim))) * 4 * 2;
    for (const auto& variant : opt::attention_variants()) {  // every step of the lesson
      out.push_back({"scaled_dot_product_attention_" + variant.name, "opt", e.name,
                     max_abs_difference(variant.function(q, k, v, cfg), expected), tol});
    }
    for (const auto& b : headline_backends(ch00::backends(), include_cuda)) {
      out.push_back({"scaled_dot_product_attention", b.name, e.name, max_abs_difference(b.sdpa(q, k, v, cfg), expected), tol});
      out.push_back({"softmax", b.name, "rows of 3 q, " + e.name, max_abs_difference(b.softmax(logits), expected_softmax), 1e-6});
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------- --markdown

// 003 §2.3 ("the extra parameters are not large") and 000 L155 ("h heads take about the time of
// one large head"): parameters and work of h heads of d_k = d/h against one head of d_k = d.
std::string multi_head_vs_one_head_markdown() {
  std::ostringstream md;
  md << "## Multi-head vs one head of the same d_model (biases included)\n\n";
  std::vector<std::vector<std::string>> rows;
  const long long d = 512;
  const double bare = analysis::attention_params(d, 1, d, false);
  for (const auto& [label, heads, head_dim, w_o] :
       {std::tuple{"one head, W_Q W_K W_V only (attention before 2017)", 1LL, d, false},
        std::tuple{"one head, d_k = d, with W_O", 1LL, d, true}, std::tuple{"8 heads, d_k = d/8 = 64", 8LL, d / 8, true},
        std::tuple{"64 heads, d_k = d/64 = 8", 64LL, d / 64, true},
        std::tuple{"8 heads, each d_k = d (not split)", 8LL, d, true}}) {
    const double p = analysis::attention_params(d, heads, head_dim, w_o);
    rows.push_back({label, fixed(p, 0), fixed(p / (4.0 * d * d + 4.0 * d), 3), fixed(100 * (p / bare - 1), 1) + "%"});
  }
  md << "d = 512 (the 2017 Transformer).\n\n"
     << markdown_table({"attention block", "parameters", "/ (4d^2 + 4d)", "more than the bare head"}, rows) << '\n';

  md << "The attention core softmax(Q K^T / sqrt(d_k)) V for n queries and keys, d = 512 (projections "
        "excluded; FLOPs = 2 x multiply-adds):\n\n";
  rows.clear();
  for (long long n : {512LL, 1024LL, 4096LL})
    for (long long heads : {1LL, 8LL}) {
      const auto w = analysis::attention_core_work(n, heads, d / heads);
      rows.push_back({std::to_string(n), std::to_string(heads), std::to_string(d / heads), sci(w.matmul_flops),
                      sci(w.exponentials), analysis::format_bytes(4 * w.score_elements)});
    }
  md << markdown_table({"n", "heads h", "d_k", "QK^T and PV FLOPs", "exponentials", "fp32 scores"}, rows)
     << "\nThe matrix products cost 4 n^2 d FLOPs whatever h is; the softmax's exponentials and the score "
        "matrices grow h-fold. The measured time is in the lesson (bench `heads_vs_one_wide_head`).\n\n";
  return md.str();
}


std::string markdown(const GlobalOptions&) {
  std::ostringstream md;
  md << results_header("00_attention_basics", "Chapter 00, attention basics");
  md << "## The documents' numbers\n\n" << checks_markdown(document_checks()) << '\n';

  md << "## Memory of S and A (batch 1, S and A kept, as the unfused algorithm does)\n\n";
  std::vector<std::vector<std::string>> rows;
  for (long long n : {2048LL, 8192LL, 32768LL, 131072LL})
    for (DType t : {DType::fp32, DType::fp16}) {
      const auto m = analysis::attention_matrix_memory(n, 96, 96, t);
      rows.push_back({std::to_string(n), analysis::dtype_name(t), analysis::format_bytes(m.bytes_per_head),
                      analysis::format_bytes(m.bytes_per_layer), analysis::format_bytes(m.bytes_total)});
    }
  md << markdown_table({"n", "dtype", "one head", "one layer (96 heads)", "96 layers"}, rows) << '\n';

  md << "## Attention vs FFN compute of one layer (GPT-3 shape: d = 12288, d_ff = 4d)\n\n";
  rows.clear();
  for (long long n : {512LL, 2048LL, 8192LL, 32768LL}) {
    const auto m = analysis::layer_macs(n, 12288, 4 * 12288);
    rows.push_back({std::to_string(n), sci(m.qkvo_projection), sci(m.scores + m.weighted_values), sci(m.ffn),
                    sci(2 * m.total()), fixed(100 * m.ffn_share(), 1) + "%"});
  }
  md << markdown_table({"n", "4nd^2 MACs", "2n^2 d MACs", "FFN MACs", "total FLOPs", "FFN share"}, rows) << '\n';

  md << multi_head_vs_one_head_markdown();

  md << "## Why divide by sqrt(d_k): Monte Carlo, 2000 queries x 64 keys, N(0, 1) entries, seed 2024\n\n";
  rows.clear();
  for (int d_k : {4, 16, 64, 256, 1024}) {
    const auto s = analysis::dot_product_scaling(d_k, 2000, 64, 2024);
    rows.push_back({std::to_string(d_k), fixed(s.var_unscaled, 2), fixed(s.var_scaled, 3), fixed(s.max_weight_unscaled, 3),
                    fixed(s.max_weight_scaled, 3), sci(s.jacobian_unscaled, 3), sci(s.jacobian_scaled, 3)});
  }
  md << markdown_table({"d_k", "Var(q.k)", "Var(q.k/sqrt d_k)", "max weight, unscaled", "max weight, scaled",
                        "median ||J||_F unscaled", "median ||J||_F scaled"},
                       rows)
     << "\nJ = diag(p) - p p^T is the softmax Jacobian: the factor every gradient through the softmax is "
        "multiplied by.\n\n";

  md << "## Reference vs optimized\n\n" << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// ------------------------------------------------------------------------------------- --step

// What --step shows, kept for --svg.
struct Steps {
  DTensor2 masked_scores;  // scaled scores of head 0, -inf where masked
  DTensor2 weights;        // P of head 0
};

// Recomputes head 0 step by step in double and prints every state to `out` (a stream without a
// buffer prints nothing: --svg uses the same computation silently).
Steps step_through(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg, std::ostream& out) {
  const std::size_t n_q = q.shape()[1], n_k = k.shape()[1], d = q.shape()[2];
  const Tensor2 q0 = xt::view(q, 0, xt::all(), xt::all()), k0 = xt::view(k, 0, xt::all(), xt::all());
  const Tensor2 v0 = xt::view(v, 0, xt::all(), xt::all());
  out << "Scaled dot-product attention, head 0 of " << q.shape()[0] << " (n_q = " << n_q << ", n_k = " << n_k
      << ", d_k = " << d << (cfg.mask.causal ? ", causal" : "") << ")\n";
  print_step(out, 1, "the inputs Q and K of head 0");
  print_matrix(out, "Q", q0);
  print_matrix(out, "K", k0);

  print_step(out, 2, "raw scores S = Q K^T   (S_ij = sum_d Q_id K_jd)");
  DTensor2 s = xt::zeros<double>({n_q, n_k});
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_k; ++j)
      for (std::size_t c = 0; c < d; ++c) s(i, j) += static_cast<double>(q0(i, c)) * k0(j, c);
  print_matrix(out, "S", s);

  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  print_step(out, 3, "scale by 1/sqrt(d_k) = " + fixed(scale, 4) + " so the scores have unit variance");
  s *= scale;
  print_matrix(out, "S / sqrt(d_k)", s);

  const bool only_causal = cfg.mask.causal && !cfg.mask.window && cfg.mask.causal_align == CausalAlign::bottom_right;
  print_step(out, 4, cfg.mask.is_none() ? std::string("no mask")
                     : !only_causal          ? "mask: " + describe(cfg.mask) + " (hidden entries become -inf)"
                                  : n_q == n_k ? std::string("causal mask: key j is hidden from query i when j > i")
                                               : "causal mask: key j is hidden from query i when j > i + " +
                                                     std::to_string(n_k - n_q) + " (n_k - n_q)");
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_k; ++j)
      if (!cfg.mask.allows(i, j, n_q, n_k)) s(i, j) = -std::numeric_limits<double>::infinity();
  print_matrix(out, "masked S", s);

  print_step(out, 5, "row maximum m_i = max_j S_ij (subtracted so no exponent is positive)");
  DTensor2 m = DTensor2::from_shape({n_q, 1});
  for (std::size_t i = 0; i < n_q; ++i) {
    m(i, 0) = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < n_k; ++j) m(i, 0) = std::max(m(i, 0), s(i, j));
  }
  print_matrix(out, "m", m);

  print_step(out, 6, "exponentials E_ij = exp(S_ij - m_i) and row sums l_i");
  DTensor2 e = xt::zeros<double>({n_q, n_k}), l = xt::zeros<double>({n_q, std::size_t{1}});
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_k; ++j) {
      e(i, j) = std::exp(s(i, j) - m(i, 0));
      l(i, 0) += e(i, j);
    }
  print_matrix(out, "E", e);
  print_matrix(out, "l", l);

  print_step(out, 7, "normalise: P_ij = E_ij / l_i (each row sums to 1)");
  DTensor2 p = e;
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_k; ++j) p(i, j) /= l(i, 0);
  print_matrix(out, "P", p);

  print_step(out, 8, "output O = P V   (each row a weighted average of the value rows)");
  print_matrix(out, "V", v0);
  DTensor2 o = xt::zeros<double>({n_q, v0.shape()[1]});
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_k; ++j)
      for (std::size_t c = 0; c < v0.shape()[1]; ++c) o(i, c) += p(i, j) * v0(j, c);
  print_matrix(out, "O", o);
  const Tensor3 ref_out = ref::scaled_dot_product_attention(q, k, v, cfg);
  double diff = 0.0;
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t c = 0; c < v0.shape()[1]; ++c) diff = std::max(diff, std::fabs(o(i, c) - ref_out(0, i, c)));
  out << "\nmax |O - ref::scaled_dot_product_attention| = " << sci(diff, 2) << "\n";
  return {s, p};
}

// ---------------------------------------------------------------------------------------- run

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown(g);
    return 0;
  }
  // --load: the sizes are the arrays' (read from the headers only: the run is costed first).
  const Load load(o.load);
  const AttentionSizes sizes = attention_sizes(load, o, {o.heads, o.seq, o.seq_k, o.head_dim});
  const int heads_size = sizes.heads, seq_size = sizes.seq, seq_k_size = sizes.seq_k, head_dim_size = sizes.head_dim;
  require_positive("00_attention_basics", "--heads", heads_size);
  require_positive("00_attention_basics", "--seq", seq_size);
  require_positive("00_attention_basics", "--head-dim", head_dim_size);
  require(seq_k_size >= 0, "00_attention_basics", "--seq-k (", seq_k_size, ") must be >= 0 (0 means --seq)");
  const auto heads = static_cast<std::size_t>(heads_size), n_q = static_cast<std::size_t>(seq_size);
  const auto n_k = seq_k_size > 0 ? static_cast<std::size_t>(seq_k_size) : n_q,
             d = static_cast<std::size_t>(head_dim_size);
  // What the run will take, before anything is allocated: the inputs, every backend's output, the
  // optimized versions' score matrix per thread, --step's matrices in double; the loop reference's
  // two products Q K^T and P V and an exponential per score (and --step's, in double).
  const std::string seq_option = seq_k_size > 0 && n_k > n_q ? "--seq-k" : "--seq";
  RunCost cost;
  cost.memory("the inputs q, k, v", {heads, n_q + 2 * n_k, d}, sizeof(float), seq_option)
      .memory("every backend's output", {ch00::backends().size(), heads, n_q, d}, sizeof(float), "--seq")
      .memory("the scores of one head per thread", {static_cast<std::uint64_t>(omp_get_max_threads()), n_q, n_k},
              sizeof(float), seq_option)
      .work("the loop reference's scores, exponentials and P V, and the other backends'", {heads, n_q, n_k, 2 * d + kExpCost},
            seq_option, backends_work_factor(o.backend, ch00::backends().size()));
  if (o.step || !o.svg.empty())
    cost.memory("--step's matrices in double", {4, n_q, n_k}, sizeof(double), seq_option)
        .work("--step's products in double", {2, n_q, n_k, d}, seq_option);
  cost.require_affordable(g, o);
  Rng rng(g.seed);
  const Tensor3 q = load.enabled() ? load.tensor3("q", {heads, n_q, d}, "[heads, seq, head_dim]")
                                   : rng.normal_tensor(heads, n_q, d);
  const Tensor3 k = load.enabled() ? load.tensor3("k", {heads, n_k, d}, "[heads, seq_k, head_dim] (those of q.npy)")
                                   : rng.normal_tensor(heads, n_k, d);
  const Tensor3 v = load.enabled() ? load.tensor3("v", {heads, n_k, d}, "[heads, seq_k, head_dim] (those of k.npy)")
                                   : rng.normal_tensor(heads, n_k, d);
  AttentionConfig cfg;
  cfg.mask = attention_mask(o.mask);

  // Agreement threshold, as in the tests: float against double, scores of size about sqrt(d_k)
  // after the scale, outputs that are reductions of length n_k (tvlab::attention_tolerance).
  const double threshold = attention_tolerance(d, n_k, std::sqrt(static_cast<double>(d)),
                                               static_cast<double>(xt::amax(xt::abs(v))()));
  const auto run_one = [&](const ch00::Backend& b) -> std::optional<Run> {
    if (!b.sdpa) return std::nullopt;
    Run run;
    run.outputs.push_back({"scaled_dot_product_attention", b.sdpa(q, k, v, cfg), threshold});
    return run;
  };
  // The reference first: it validates the inputs, so --step never prints an invalid case.
  const Run expected = *run_one(reference_backend(ch00::backends()));
  std::optional<Steps> steps_shown;
  if (o.step) steps_shown = step_through(q, k, v, cfg, std::cout);
  if (!o.svg.empty()) {
    // One labelled cell per (query, key): a figure for a projector, not for n in the thousands.
    require(n_q <= 64 && n_k <= 64, "00_attention_basics", "--svg draws one cell per query and key: use --seq (",
            n_q, ") and --seq-k (", n_k, ") of at most 64");
    std::ostream silent(nullptr);
    Steps steps = step_through(q, k, v, cfg, silent);
    // Masked cells in grey: copy the -inf of the masked scores into the weights.
    for (std::size_t i = 0; i < steps.weights.size(); ++i)
      if (std::isinf(steps.masked_scores.data()[i])) steps.weights.data()[i] = steps.masked_scores.data()[i];
    write_svg(o.svg, svg_heatmap(steps.weights,
                                 "Attention weights P of head 0" + std::string(o.mask.causal ? ", causal" : "") + " (n = " +
                                     std::to_string(n_q) + ", d_k = " + std::to_string(d) + ", seed " +
                                     std::to_string(g.seed) + ")",
                                 "query i", "key j"));
  }
  Dump dump(o.dump);
  for (const auto& [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}}) dump.write(name, *t);
  if (steps_shown) {  // --step's matrices of head 0, in the double precision they were computed in
    dump.write_double("step_scores", steps_shown->masked_scores);
    dump.write_double("step_weights", steps_shown->weights);
  }
  RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                   "scaled_dot_product_attention: heads " + std::to_string(heads) + ", seq_q " + std::to_string(n_q) +
                       ", seq_k " + std::to_string(n_k) + ", head_dim " + std::to_string(d) +
                       ", " + describe(cfg.mask) + ", seed " + std::to_string(g.seed),
                   {{"heads", heads}, {"seq_q", n_q}, {"seq_k", n_k}, {"head_dim", d}, {"mask", describe(cfg.mask)}},
                   g.format == "json"};
  return run_backends(ch00::backends(), o.backend, run_one, expected, dump, report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "attention";
  c.summary = "scaled dot-product and multi-head attention, the cost of the n x n matrix, why 1/sqrt(d_k)";
  c.figures.push_back({"docs/figures/ch00_causal_attention.svg", "attention --causal --seq 8 --head-dim 4 --heads 1 --backend ref"});
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "attention", "Chapter 00: scaled dot-product attention, step by step", *o,
        "print every intermediate state of head 0 (Q K^T, scale, mask, max, exp, P, PV)",
        "write q.npy, k.npy, v.npy, <function>_<backend>.npy and, with --step, head 0's step_scores.npy and "
        "step_weights.npy (float64) to DIR", backend_lines(ch00::backends()), [o, &global] { return run(*o, global); });
    sub.option("--heads", o->heads, "number of heads h");
    sub.option("--seq", o->seq, "sequence length n (queries)");
    sub.option("--seq-k", o->seq_k, "number of keys (default: --seq)", ShowDefault::no);
    sub.option("--head-dim", o->head_dim, "head dimension d_k");
    add_mask_options(sub, o->mask);
    sub.option("--svg", o->svg, "draw head 0's attention weights P as a heatmap into FILE", ShowDefault::no);
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

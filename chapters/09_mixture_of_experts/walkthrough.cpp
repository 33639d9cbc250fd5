// `tvlab 09_mixture_of_experts` (alias `tvlab moe`): an MoE layer on random weights. --step walks
// token 0 through the router (logits, scores, the k chosen, their gates) and the layer (each chosen
// expert's output and the gate-weighted sum); --backend runs the registry; --markdown prints
// results.md; `tvlab tour` checks agreement and the documents' numbers.

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/analysis/moe_load.hpp"
#include "tvlab/analysis/moe_params.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/moe.hpp"

namespace tvlab::cli {
namespace {

struct Options : StandardOptions {
  int tokens = 6, d_model = 8, d_ff = 16, experts = 4, top_k = 2, shared = 0;
  std::string model, config, dtype;  // the parameter calculator: --model NAME | list, --config FILE, --dtype
  int ranks = 0, max_ranks = 0;       // expert parallelism: mpirun -np ranks moe_mpi --step
};

// --ranks N: the dispatch and combine of expert parallelism step by step, by moe_mpi under mpirun
// (built where MPI was found; `tvlab` itself does not link MPI).
int run_ranks(const Options& o) {
  // processes on this machine: more than a few only shows the oversubscription
  constexpr int kMaxRanks = 16;
  require(o.ranks >= 1 && o.ranks <= kMaxRanks, TVLAB_CHAPTER_NAME, "--ranks (", o.ranks, ") must be in 1..", kMaxRanks,
          " (the ranks run on this machine)");
  require(o.max_ranks >= 0 && o.max_ranks <= o.ranks, TVLAB_CHAPTER_NAME, "--max-ranks (", o.max_ranks,
          ") must be 0 (no limit) or in 1..--ranks (", o.ranks, ")");
#if defined(TVLAB_MOE_MPI) && defined(TVLAB_MPIEXEC)
  // Open MPI refuses to run as root unless told; more ranks than cores need --oversubscribe
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  std::string command = std::string("'") + TVLAB_MPIEXEC + "' --oversubscribe -np " + std::to_string(o.ranks) + " '" +
                        TVLAB_MOE_MPI + "' --step";
  if (o.max_ranks > 0) command += " --max-ranks " + std::to_string(o.max_ranks);
  std::cout << "$ " << command << "\n" << std::flush;
  const int status = std::system(command.c_str());
  require(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) != 127, TVLAB_CHAPTER_NAME, "--ranks: could not run ",
          TVLAB_MPIEXEC);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
#else
  fail(TVLAB_CHAPTER_NAME, "--ranks needs moe_mpi, built only where MPI is found (`make deps` installs Open MPI; then reconfigure)");
#endif
}

// A random layer: router and experts ~ N(0, 1 / fan_in), so that logits and outputs stay O(1).
MoeWeights random_layer(Rng& rng, std::size_t d_model, std::size_t d_ff, std::size_t experts, std::size_t shared) {
  MoeWeights w;
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(d_model)), ff_scale = 1.0 / std::sqrt(static_cast<double>(d_ff));
  w.router = rng.normal_matrix(d_model, experts, 0.0, in_scale);
  auto expert = [&] {
    return SwigluWeights{rng.normal_matrix(d_model, d_ff, 0.0, in_scale), rng.normal_matrix(d_model, d_ff, 0.0, in_scale),
                         rng.normal_matrix(d_ff, d_model, 0.0, ff_scale)};
  };
  for (std::size_t e = 0; e < experts; ++e) w.experts.push_back(expert());
  for (std::size_t s = 0; s < shared; ++s) w.shared.push_back(expert());
  return w;
}

// The documents' MoE numbers (inventory 09.C), each recomputed from a config.json or a paper's table.
std::vector<DocumentCheck> document_checks() {
  using namespace analysis;
  const auto B = [](double n) { return n / 1e9; };
  const auto billions = [&](double n, int decimals) { return fixed(B(n), decimals) + "B"; };
  std::vector<DocumentCheck> c;

  // The work per token is k experts' (004 L153 "about K times a dense FFN"): top-2 on Mixtral's experts.
  const MoeShape& mixtral = moe_shape("mixtral-8x7b");
  const double one_expert_flops = 2.0 * static_cast<double>(expert_parameters_per_layer(mixtral));
  const double top2 = static_cast<double>(mixtral.num_experts_per_tok) * one_expert_flops;
  c.push_back(check_number("004 L153", "expert FLOPs per token at top-2, in units of one dense SwiGLU FFN", "about K = 2",
                           2.0, 0.01, top2 / one_expert_flops, fixed(top2 / one_expert_flops, 2)));

  // Mixtral 8x7B (000 L299; 004 L169), from its config.json.
  const MoeParameters mt = moe_total_parameters(mixtral), ma = moe_active_parameters(mixtral);
  const double mixtral_expert = static_cast<double>(expert_parameters_across_layers(mixtral));
  const double mixtral_shared = static_cast<double>(mt.total() - mt.routed_experts);
  c.push_back(check_number("000 L299", "Mixtral 8x7B, total parameters", "46.7B", 46.7, 0.1, B(mt.total()),
                           billions(mt.total(), 2)));
  c.push_back(check_number("000 L299", "Mixtral 8x7B, parameters a token uses (top-2)", "about 13B", 13, 1,
                           B(ma.total()), billions(ma.total(), 2)));
  c.push_back(check_number("004 L169", "Mixtral 8x7B, active parameters", "12.9B", 12.9, 0.1, B(ma.total()),
                           billions(ma.total(), 2)));
  c.push_back(check_number("000 L299", "Mixtral 8x7B, what every token shares (attention, embeddings, routers, norms)",
                           "about 2B", 2, 1, B(mixtral_shared),
                           billions(mixtral_shared, 2) + " (attention " + billions(mt.attention, 2) + ")"));
  c.push_back(check_number("000 L299", "Mixtral 8x7B, one expert (its FFN in all 32 layers)", "about 5B", 5, 1,
                           B(mixtral_expert), billions(mixtral_expert, 2) + "; 1.61B + 2 x 5.64B = 12.88B"));
  c.push_back(check_number("000 L299", "Mixtral 8x7B, \"each expert 7B\"", "7B", 7, 1, B(mixtral_expert),
                           billions(mixtral_expert, 2) + " (the 7B is Mistral 7B, whose FFN each expert copies)"));
  c.push_back(check_number("000 L299", "Mixtral 8x7B's cost per token, in parameters used", "close to a 7B model", 7, 1,
                           B(ma.total()), billions(ma.total(), 2) + ": a 13B dense model's work, 1.78x Mistral 7B's 7.24B"));

  // DeepSeek-V3 (000 L301; 004 L169, L179), from its config.json.
  const MoeShape& v3 = moe_shape("deepseek-v3");
  const MoeParameters vt = moe_total_parameters(v3), va = moe_active_parameters(v3);
  const double v3_expert = static_cast<double>(expert_parameters_across_layers(v3));
  c.push_back(check_number("000 L301", "DeepSeek-V3, total parameters (MTP module not counted)", "671B", 671, 1,
                           B(vt.total()), billions(vt.total(), 2)));
  c.push_back(check_number("000 L301", "DeepSeek-V3, experts per MoE layer (routed + shared)", "257", 257, 1,
                           static_cast<double>(v3.num_experts + v3.shared_intermediate_size / v3.moe_intermediate_size),
                           std::to_string(v3.num_experts) + " + 1"));
  c.push_back(check_number("000 L301", "DeepSeek-V3, one expert: 3 x 7168 x 2048 = 44.04M a layer, over its 58 MoE layers",
                           "about 2.55B", 2.55, 0.01, B(v3_expert), billions(v3_expert, 3)));
  c.push_back(check_number("000 L301", "DeepSeek-V3, experts a token uses (routed + shared)", "9", 9, 1,
                           static_cast<double>(v3.num_experts_per_tok + 1), std::to_string(v3.num_experts_per_tok) + " + 1"));
  c.push_back(check_number("000 L301", "DeepSeek-V3, active parameters (embedding table not counted)", "about 37B", 37, 1,
                           B(va.without_embedding()),
                           billions(va.without_embedding(), 2) + " (" + billions(va.total(), 2) + " with the table)"));
  // 004 L179: all 671B at 4 bits; the codes alone, then ggml's Q4_K (4.5 bits, a scale and a minimum per 32).
  const double int4 = parameter_bytes(vt.total(), 4) / 1e9, q4_k = parameter_bytes(vt.total(), format_bits("Q4_K")) / 1e9;
  c.push_back(check_number("004 L179", "DeepSeek-V3 in INT4, GB (4 bits a weight, nothing else)", "about 335 GB", 335, 1,
                           int4, fixed(int4, 1) + " GB; Q4_K: " + fixed(q4_k, 1) + " GB"));
  // 004 L179: the minimum batch E K. With T = E K tokens each expert expects T k / E = k^2 of them.
  const double ek = static_cast<double>(v3.num_experts * v3.num_experts_per_tok);
  c.push_back({"004 L179", "minimum batch of an MoE layer, E K tokens (DeepSeek-V3: E = 256, k = 8)", "E K tokens",
               fixed(ek, 0) + " tokens; each expert then expects k^2 = " +
                   fixed(ek * static_cast<double>(v3.num_experts_per_tok) / static_cast<double>(v3.num_experts), 0) +
                   " (E / k = 32 tokens already give it one)",
               true});
  // 004 L153: capacity = ceil(T / E x c); 4096 tokens, 8 experts, c = 1.25.
  const double capacity = static_cast<double>(expert_capacity(4096, 8, 1.25));
  c.push_back(check_number("004 L153", "capacity factor 1.25 on 4096 tokens and 8 experts: buffer over the even 512, %",
                           "25%", 25, 1, (capacity / 512.0 - 1) * 100,
                           fixed(capacity, 0) + " tokens an expert, " + fixed((capacity / 512.0 - 1) * 100, 0) + "%"));

  // DeepSeek-V2 (004 L175): 160 routed experts of width 1536 "instead of the traditional 8192".
  const MoeShape& v2 = moe_shape("deepseek-v2");
  c.push_back(check_number("004 L175", "DeepSeek-V2, routed experts", "160", 160, 1, static_cast<double>(v2.num_experts),
                           std::to_string(v2.num_experts)));
  c.push_back(check_number("004 L175", "DeepSeek-V2, an expert's d_ff", "1536", 1536, 1,
                           static_cast<double>(v2.moe_intermediate_size), std::to_string(v2.moe_intermediate_size)));
  c.push_back(check_number("004 L175", "DeepSeek-V2, the dense FFN width the experts replace", "8192", 8192, 1,
                           static_cast<double>(v2.intermediate_size),
                           std::to_string(v2.intermediate_size) + " (its dense first layer)"));

  // Qwen2-57B-A14B and Qwen3-MoE, Llama 4 (004 L169, Table 8-5).
  const MoeShape& qwen2 = moe_shape("qwen2-57b-a14b");
  const MoeParameters qt = moe_total_parameters(qwen2), qa = moe_active_parameters(qwen2);
  c.push_back(check_number("004 L169", "Qwen MoE (Qwen2-57B-A14B), total", "57B", 57, 1, B(qt.total()), billions(qt.total(), 2)));
  c.push_back(check_number("004 L169", "Qwen MoE (Qwen2-57B-A14B), active", "14B", 14, 1, B(qa.total()), billions(qa.total(), 2)));
  c.push_back(check_number("004 L169", "Qwen2-57B-A14B, shared experts (shared width / expert width)", "8", 8, 1,
                           static_cast<double>(qwen2.shared_intermediate_size) / static_cast<double>(qwen2.moe_intermediate_size),
                           "20480 / 2560 = 8: one shared FFN of 8 experts' width"));
  const double qwen3 = B(moe_total_parameters(moe_shape("qwen3-235b-a22b")).total());
  c.push_back(check_number("004 L169", "Qwen3-MoE (its largest, Qwen3-235B-A22B), total", "about 200B", 200, 10, qwen3,
                           fixed(qwen3, 2) + "B"));
  const double maverick = B(moe_total_parameters(moe_shape("llama-4-maverick")).total());
  c.push_back(check_number("004 L169", "Llama 4 (Maverick), total of the decoder (vision encoder not counted)",
                           "about 400B", 400, 10, maverick, fixed(maverick, 2) + "B"));

  // Switch Transformer (Fedus et al. 2021, Table 9): the experts of Switch-Base (T5-Base, 12 + 12
  // layers, 128 experts in every other FFN) and Switch-C (15 + 15 layers, 2048 experts in every FFN),
  // each expert a ReLU FFN of 2 d_model d_ff; plus T5-Base's other 223M - 12 replaced FFNs for Base.
  const auto switch_experts = [](double layers, double experts, double d_model, double d_ff) {
    return layers * experts * 2 * d_model * d_ff;
  };
  const double base = switch_experts(12, 128, 768, 3072) + 223e6 - 12 * 2 * 768 * 3072.0;
  const double switch_c = switch_experts(30, 2048, 2080, 6144);
  c.push_back(check_number("000 L297", "Switch Transformer's smallest (Switch-Base)", "7B", 7, 1, B(base), billions(base, 2)));
  c.push_back(check_number("004 L167", "Switch Transformer's smallest (Switch-Base)", "8B", 8, 1, B(base),
                           billions(base, 2) + " (Table 9: 7B)"));
  c.push_back(check_number("000 L297", "Switch Transformer's largest (Switch-C), its experts", "1.6T", 1.6, 0.1,
                           switch_c / 1e12, fixed(switch_c / 1e12, 3) + "T (Table 9: 1571B)"));

  // DeepSeek-V3's training (arXiv:2412.19437, Table 1): pre-training 2664K, context extension 119K,
  // post-training 5K H800 hours, at the report's assumed $2 an hour.
  const double hours = 2664e3 + 119e3 + 5e3;
  c.push_back(check_number("004 L181", "DeepSeek-V3's training cost, million USD (2.788M H800 hours at 2 USD an hour)", "about 5.6M USD", 5.6, 0.1,
                           hours * 2 / 1e6, fixed(hours * 2 / 1e6, 3) + "M USD"));
  c.push_back(check_number("004 L175", "H800 hours of DeepSeek-V3's pre-training on 14.8T tokens, M", "2.788M", 2.788,
                           0.001, 2664e3 / 1e6, "2.664M (2.788M is the whole training)"));
  // 004 L181 "about 1/4 of a dense model of the same size": training FLOPs 6 N D scale with the
  // parameters a token uses, 36.6B against 671B.
  const double ratio = static_cast<double>(va.without_embedding()) / static_cast<double>(vt.total());
  c.push_back(check_number("004 L181", "DeepSeek-V3's training FLOPs against a dense 671B's (6 N D)", "about 1/4", 0.25,
                           0.05, ratio, fixed(ratio, 3) + " = 1/" + fixed(1 / ratio, 1)));
  return c;
}

// Every non-reference backend that can run here against the reference, on fixed inputs.
std::vector<Agreement> agreements(bool include_cuda) {
  Rng rng(9);
  const MoeWeights w = random_layer(rng, 32, 48, 8, 1);
  const Tensor2 x = rng.normal_matrix(37, 32);
  ref::RouterConfig cfg;
  cfg.num_experts = 8;
  cfg.top_k = 2;
  const Routing r = ref::route_top_k(ref::router_logits(x, w), cfg);
  const auto& reference = reference_backend(moe::backends());
  const Tensor2 expected = reference.moe_experts(x, w, r);
  std::vector<Agreement> out;
  for (const auto& b : moe::backends()) {
    if (b.kind == BackendKind::reference || b.kind == BackendKind::student || !b.moe_experts) continue;
    if (b.kind == BackendKind::cuda && !include_cuda) continue;  // results.md must not depend on the machine
    Agreement a{"moe_experts", b.name, "37 tokens, d_model 32, d_ff 48, E = 8, k = 2, 1 shared", 0.0, 1e-5};
    if (unavailable_reason(b.caps))
      a.skipped = true;
    else
      a.max_abs_error = max_abs_difference(b.moe_experts(x, w, r), expected);
    out.push_back(a);
  }
  return out;
}

std::string percent(double fraction) { return fixed(100.0 * fraction, 1) + "%"; }

// Dropped assignments against the capacity factor: 4096 tokens, balanced and skewed routers.
std::string drop_rate_markdown() {
  const std::vector<double> factors = {1.0, 1.25, 1.5, 2.0};
  const std::vector<analysis::DropRateRow> rows = analysis::drop_rate_table(4096, {8, 64}, {1, 2}, factors, 1.0, 9);
  std::vector<std::vector<std::string>> table;
  for (std::size_t i = 0; i < rows.size(); i += factors.size()) {
    std::vector<std::string> row = {rows[i].data, std::to_string(rows[i].num_experts), std::to_string(rows[i].top_k),
                                    fixed(rows[i].max_over_mean, 2)};
    for (std::size_t f = 0; f < factors.size(); ++f) row.push_back(percent(rows[i + f].dropped));
    table.push_back(row);
  }
  return markdown_table({"router", "E", "k", "busiest / mean load", "dropped, cf 1.0", "cf 1.25", "cf 1.5", "cf 2.0"}, table);
}

// DeepSeek-V3's bias update over a stream of batches against the plain router.
std::string bias_markdown() {
  const analysis::BiasBalanceTable t =
      analysis::bias_balance_table(200, 512, 16, 2, {0.001, 0.01}, {0, 1, 5, 10, 25, 50, 100, 150, 199}, 1.0, 9);
  std::vector<std::string> header = {"batch"};
  std::vector<std::vector<std::string>> rows = {{"no bias"}};
  for (double g : t.gammas) rows.push_back({"bias, gamma = " + fixed(g, 3)});
  for (const analysis::BiasBalanceRow& r : t.rows) {
    header.push_back(std::to_string(r.step));
    rows[0].push_back(fixed(r.plain, 2));
    for (std::size_t g = 0; g < t.gammas.size(); ++g) rows[g + 1].push_back(fixed(r.biased[g], 2));
  }
  return markdown_table(header, rows);
}

// The routers side by side: how even, and how many tokens left without an expert.
std::string routers_markdown() {
  const std::vector<analysis::RouterBalanceRow> rows = analysis::router_balance_table(4096, {8, 64}, 1.0, 9);
  std::vector<std::vector<std::string>> table;
  for (const analysis::RouterBalanceRow& r : rows)
    table.push_back({r.data, std::to_string(r.num_experts), r.router, fixed(r.max_over_mean, 3), percent(r.unrouted),
                     r.iterations ? std::to_string(r.iterations) : "-"});
  return markdown_table({"router logits", "E", "routing", "busiest / mean load", "tokens with no expert", "Sinkhorn iterations"}, table);
}

std::string uniform_markdown() {
  const analysis::UniformBalance u = analysis::uniform_logits_balance(4096, 8, 2, 1.0, 9);
  return markdown_table({"quantity (E = 8, k = 2, 4096 tokens)", "value"},
                        {{"P_i at zero logits", fixed(u.mean_prob[0], 4) + " each"},
                         {"L_aux at zero logits (k-normalised, alpha 1)", fixed(u.aux_k_normalised, 4)},
                         {"the same in Hugging Face Mixtral's form", fixed(u.aux_mixtral, 4)},
                         {"z-loss at zero logits, (ln 8)^2", fixed(u.z_loss, 6)},
                         {"L_aux of a random router's own routing", fixed(u.aux_balanced_router, 4)},
                         {"L_aux of the skewed router's routing", fixed(u.aux_skewed_router, 4)}});
}

std::string markdown() {
  std::ostringstream md;
  md << results_header(TVLAB_CHAPTER_NAME, "Mixture of experts");
  md << "## The documents' numbers\n\n" << checks_markdown(document_checks()) << '\n';
  md << "## Capacity and dropped tokens\n\n"
     << "4096 tokens (N(0, 1), d = 64, a random router N(0, 1/d)); skewed: expert e's logit lowered by ln(1 + e). "
        "Top-k, capacity over the k N assignments, C = ceil(k N / E x cf); dropped assignments in % of k N:\n\n"
     << drop_rate_markdown() << '\n';
  md << "## The balance objectives at uniform logits\n\n" << uniform_markdown() << '\n';
  md << "## Balancing without a loss\n\n"
     << "200 batches of 512 tokens from a skewed distribution, E = 16, k = 2: the busiest expert's load over the mean, "
        "without the bias and with DeepSeek-V3's update b_i <- b_i + gamma sign(mean - load_i) after each batch:\n\n"
     << bias_markdown() << '\n';
  md << "## Routers compared\n\n" << routers_markdown() << '\n';
  md << "## Reference vs optimized\n\n" << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// Token 0 through the router and the layer, in the reference's order.
void step_through(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg) {
  const Tensor2 logits = ref::router_logits(x, w);
  const std::size_t d_model = x.shape()[1], num_experts = cfg.num_experts;
  print_step(std::cout, 1, "token 0, x_0 (" + std::to_string(d_model) + " values)");
  print_matrix(std::cout, "x_0", Tensor2(xt::view(x, xt::range(0, 1), xt::all())));
  print_step(std::cout, 2, "the router's logits z = x_0 W_g, one per expert (" + std::to_string(num_experts) + ")");
  print_matrix(std::cout, "z", Tensor2(xt::view(logits, xt::range(0, 1), xt::all())));
  const Tensor2 scores = ref::router_scores(Tensor2(xt::view(logits, xt::range(0, 1), xt::all())), cfg);
  print_step(std::cout, 3, "the scores s = softmax(z): a probability per expert");
  print_matrix(std::cout, "s", scores);
  const Routing r = ref::route_top_k(logits, cfg);
  std::ostringstream chosen;
  for (std::size_t j = 0; j < cfg.top_k; ++j)
    chosen << (j ? ", " : "") << "expert " << r.expert[j] << " (s = " << fixed(scores(0, r.expert[j]), 4) << ", gate "
           << fixed(r.gate[j], 4) << ")";
  print_step(std::cout, 4, "the top " + std::to_string(cfg.top_k) + ", gates renormalised to sum 1: " + chosen.str());
  Tensor2 y = xt::zeros<float>({std::size_t{1}, d_model});
  for (std::size_t j = 0; j < cfg.top_k; ++j) {
    Routing one;
    one.tokens = 1, one.num_experts = num_experts;
    one.token = {0}, one.expert = {r.expert[j]}, one.gate = {1.0f};
    MoeWeights only_routed = w;
    only_routed.shared.clear();
    const Tensor2 out = ref::moe_experts(Tensor2(xt::view(x, xt::range(0, 1), xt::all())), only_routed, one);
    print_step(std::cout, 5 + static_cast<int>(j), "expert " + std::to_string(r.expert[j]) + "'s output on x_0, times its gate " +
                                                        fixed(r.gate[j], 4));
    print_matrix(std::cout, "Expert(x_0)", out);
    y = y + r.gate[j] * out;
  }
  int step = 5 + static_cast<int>(cfg.top_k);
  if (!w.shared.empty()) {
    Routing none;
    none.tokens = 1, none.num_experts = num_experts;
    const Tensor2 shared = ref::moe_experts(Tensor2(xt::view(x, xt::range(0, 1), xt::all())), w, none);
    print_step(std::cout, step++, "the shared experts' output on x_0 (weight 1, every token)");
    print_matrix(std::cout, "Shared(x_0)", shared);
    y = y + shared;
  }
  print_step(std::cout, step, "y_0 = the sum");
  print_matrix(std::cout, "y_0", y);
}

// ---------------------------------------------------------------------------- the calculator

// --model NAME | list, or --config FILE: the model's total and active parameters by component, and
// the memory of its experts (and of the whole model) at BF16, FP8, Q8_0 and Q4_K, or at --dtype only.
int run_calculator(const Options& o, const GlobalOptions& g) {
  using namespace analysis;
  if (o.model == "list") {
    std::cout << "Built-in models (--model NAME):\n";
    for (const MoeShape& m : moe_shapes())
      std::cout << "  " << std::left << std::setw(18) << m.name << std::right << m.num_experts << " experts, top-"
                << m.num_experts_per_tok << (m.shared_intermediate_size ? " + shared" : "") << "  (" << m.source << ")\n";
    return 0;
  }
  require(o.model.empty() || o.config.empty(), TVLAB_CHAPTER_NAME, "--config: give --model or --config, not both");
  MoeShape m;
  try {
    m = o.config.empty() ? moe_shape(o.model) : read_moe_config(o.config);
  } catch (const Error& e) {
    fail(TVLAB_CHAPTER_NAME, o.config.empty() ? "--model: " : "--config: ", e.what());
  }
  std::vector<std::string> formats = {"bf16", "fp8", "Q8_0", "Q4_K"};
  if (!o.dtype.empty()) {
    try {
      format_bits(o.dtype);
    } catch (const Error& e) {
      fail(TVLAB_CHAPTER_NAME, "--dtype: ", e.what());
    }
    formats = {o.dtype};
  }
  const MoeParameters t = moe_total_parameters(m), a = moe_active_parameters(m);
  const auto b = [](long long n) { return fixed(static_cast<double>(n) / 1e9, 3); };
  const std::vector<std::pair<std::string, std::pair<long long, long long>>> parts = {
      {"embedding", {t.embedding, a.embedding}},       {"attention", {t.attention, a.attention}},
      {"routers", {t.routers, a.routers}},             {"routed experts", {t.routed_experts, a.routed_experts}},
      {"shared experts", {t.shared_experts, a.shared_experts}}, {"dense FFN layers", {t.dense_ffn, a.dense_ffn}},
      {"norms", {t.norms, a.norms}},                   {"output layer", {t.output, a.output}},
      {"total", {t.total(), a.total()}},               {"total without the embedding", {t.without_embedding(), a.without_embedding()}}};
  const long long experts = t.routed_experts + t.shared_experts;
  if (g.format == "json") {
    std::cout << "{\"chapter\": \"" << TVLAB_CHAPTER_NAME << "\", \"model\": \"" << m.name << "\", \"total\": " << t.total()
              << ", \"active\": " << a.total() << ", \"active_without_embedding\": " << a.without_embedding()
              << ", \"experts\": " << experts << ", \"bytes\": {";
    for (std::size_t i = 0; i < formats.size(); ++i)
      std::cout << (i ? ", " : "") << "\"" << formats[i] << "\": {\"experts\": "
                << std::setprecision(17) << parameter_bytes(experts, format_bits(formats[i]))
                << ", \"model\": " << parameter_bytes(t.total(), format_bits(formats[i])) << "}";
    std::cout << "}}\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, counts] : parts) rows.push_back({name, b(counts.first), b(counts.second)});
  std::vector<std::vector<std::string>> memory;
  for (const std::string& f : formats)
    memory.push_back({f, fixed(format_bits(f), 3), fixed(parameter_bytes(experts, format_bits(f)) / 1e9, 1),
                      fixed(parameter_bytes(t.total(), format_bits(f)) / 1e9, 1)});
  std::cout << m.name << ": " << m.num_hidden_layers << " layers (" << moe_layer_count(m) << " MoE), "
            << m.num_experts << " routed experts of width " << m.moe_intermediate_size << ", top-"
            << m.num_experts_per_tok
            << (m.shared_intermediate_size ? ", shared width " + std::to_string(m.shared_intermediate_size) : "")
            << (m.is_mla() ? ", MLA" : ", GQA") << "\n(" << m.source << ")\n\n"
            << markdown_table({"component", "total, B", "active, B"}, rows) << '\n'
            << markdown_table({"format", "bits a weight", "experts, GB", "whole model, GB"}, memory);
  return 0;
}

int run(const Options& o, const GlobalOptions& g) {
  if (o.given("--ranks") || o.given("--max-ranks")) return run_ranks(o);
  // The calculator (--model, --config) answers before anything else runs.
  if (!o.model.empty() || !o.config.empty()) {
    for (const char* option : {"--tokens", "--d-model", "--d-ff", "--experts", "--top-k", "--shared", "--step", "--backend", "--dump"})
      require(!o.given(option), TVLAB_CHAPTER_NAME, option, " belongs to the layer demo, not to the calculator (--model, --config)");
    return run_calculator(o, g);
  }
  require(o.dtype.empty(), TVLAB_CHAPTER_NAME, "--dtype belongs to the calculator: give --model or --config too");
  if (g.format == "markdown") {
    std::cout << markdown();
    return 0;
  }
  require_positive(TVLAB_CHAPTER_NAME, "--tokens", o.tokens);
  require_positive(TVLAB_CHAPTER_NAME, "--d-model", o.d_model);
  require_positive(TVLAB_CHAPTER_NAME, "--d-ff", o.d_ff);
  require_positive(TVLAB_CHAPTER_NAME, "--experts", o.experts);
  require_positive(TVLAB_CHAPTER_NAME, "--top-k", o.top_k);
  require(o.top_k < o.experts, TVLAB_CHAPTER_NAME, "--top-k (", o.top_k, ") must be below --experts (", o.experts, ")");
  require(o.shared >= 0, TVLAB_CHAPTER_NAME, "--shared (", o.shared, ") must be 0 or more");
  const auto tokens = static_cast<std::uint64_t>(o.tokens), d_model = static_cast<std::uint64_t>(o.d_model),
             d_ff = static_cast<std::uint64_t>(o.d_ff), experts = static_cast<std::uint64_t>(o.experts);
  RunCost cost;
  cost.memory("the experts' weights", {experts + static_cast<std::uint64_t>(o.shared), 3, d_model, d_ff}, sizeof(float), "--d-ff")
      .memory("the input and every backend's output", {moe::backends().size() + 1, tokens, d_model}, sizeof(float), "--tokens")
      .work("the loop reference's expert products", {tokens, static_cast<std::uint64_t>(o.top_k), 3, d_model, d_ff}, "--tokens");
  cost.require_affordable(g, o);
  Rng rng(g.seed);
  const MoeWeights w = random_layer(rng, static_cast<std::size_t>(o.d_model), static_cast<std::size_t>(o.d_ff),
                                    static_cast<std::size_t>(o.experts), static_cast<std::size_t>(o.shared));
  const Tensor2 x = rng.normal_matrix(static_cast<std::size_t>(o.tokens), static_cast<std::size_t>(o.d_model));
  ref::RouterConfig cfg;
  cfg.num_experts = static_cast<std::size_t>(o.experts);
  cfg.top_k = static_cast<std::size_t>(o.top_k);
  const Routing r = ref::route_top_k(ref::router_logits(x, w), cfg);
  const auto run_one = [&](const moe::Backend& b) -> std::optional<Run> {
    if (!b.moe_experts) return std::nullopt;
    Run run;
    run.outputs.push_back({"moe_experts", b.moe_experts(x, w, r), 1e-5});  // sums of d_ff products in float
    return run;
  };
  const Run expected = *run_one(reference_backend(moe::backends()));
  if (o.step) step_through(x, w, cfg);
  Dump dump(o.dump);
  dump.write("x", x);
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         "MoE layer: tokens " + std::to_string(o.tokens) + ", d_model " + std::to_string(o.d_model) + ", d_ff " +
                             std::to_string(o.d_ff) + ", E " + std::to_string(o.experts) + ", k " + std::to_string(o.top_k) +
                             ", seed " + std::to_string(g.seed),
                         {{"tokens", o.tokens}, {"d_model", o.d_model}, {"d_ff", o.d_ff}, {"experts", o.experts}, {"top_k", o.top_k}},
                         g.format == "json"};
  return run_backends(moe::backends(), o.backend, run_one, expected, dump, report);
}

}  // namespace

Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "moe";
  c.summary = "mixture of experts: routers, load balancing, capacity, the layer as grouped GEMMs";
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "moe", "Mixture of experts: one layer, token 0 step by step", *o,
        "print token 0 through the router (logits, scores, the top k, gates) and the layer (each expert's output, the sum)",
        "write x.npy and moe_experts_<backend>.npy to DIR", backend_lines(moe::backends()),
        [o, &global] { return run(*o, global); });
    sub.option("--tokens", o->tokens, "tokens in the batch");
    sub.option("--d-model", o->d_model, "the model width");
    sub.option("--d-ff", o->d_ff, "each expert's hidden width");
    sub.option("--experts", o->experts, "routed experts E");
    sub.option("--top-k", o->top_k, "experts per token k");
    sub.option("--shared", o->shared, "shared experts, which every token passes through");
    sub.option("--ranks", o->ranks,
               "expert parallelism: run moe_mpi --step on this many MPI ranks, 1 to 16 (dispatch and combine step by step)",
               ShowDefault::no);
    sub.option("--max-ranks", o->max_ranks, "with --ranks: each token's experts on at most this many ranks (0: no limit)",
               ShowDefault::no);
    sub.option("--model", o->model, "the parameter calculator: a built-in MoE model (list: the names)");
    sub.option("--config", o->config, "the parameter calculator: a Hugging Face config.json");
    sub.option("--dtype", o->dtype, "the calculator's memory at one format only: bf16, fp8, int4, Q8_0, Q4_K, ...");
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

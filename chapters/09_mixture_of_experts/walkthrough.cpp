// `tvlab 09_mixture_of_experts` (alias `tvlab moe`): an MoE layer on random weights. --step walks
// token 0 through the router (logits, scores, the k chosen, their gates) and the layer (each chosen
// expert's output and the gate-weighted sum); --backend runs the registry; --markdown prints
// results.md; `tvlab tour` checks agreement and the documents' numbers.

#include <cmath>
#include <iostream>
#include <sstream>

#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/moe.hpp"

namespace tvlab::cli {
namespace {

struct Options : StandardOptions {
  int tokens = 6, d_model = 8, d_ff = 16, experts = 4, top_k = 2, shared = 0;
};

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

// The documents' claim that the work per token is k experts' (004 L153 "about K times a dense
// FFN"): FLOPs of the layer's experts for one token, against one expert's.
std::vector<DocumentCheck> document_checks() {
  const double d_model = 4096, d_ff = 14336, one_expert = 3.0 * 2.0 * d_model * d_ff;  // three matrices, 2 FLOPs per MAC
  const double top2 = 2.0 * one_expert;
  return {check_number("004 L153", "expert FLOPs per token at top-2, in units of one dense SwiGLU FFN", "about K = 2", 2.0,
                       0.01, top2 / one_expert, fixed(top2 / one_expert, 2))};
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

std::string markdown() {
  std::ostringstream md;
  md << results_header(TVLAB_CHAPTER_NAME, "Mixture of experts");
  md << "## The documents' numbers\n\n" << checks_markdown(document_checks()) << '\n';
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

int run(const Options& o, const GlobalOptions& g) {
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
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

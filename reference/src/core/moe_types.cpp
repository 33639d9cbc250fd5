#include "tvlab/core/moe_types.hpp"

#include <cmath>
#include <string>

#include "tvlab/core/error.hpp"

namespace tvlab {

namespace {

// One expert's shapes against d_model (chapter 01's validate_swiglu without its scan of x);
// returns its d_ff.
std::size_t check_expert(const char* fn, const char* group, std::size_t i, const SwigluWeights& w, std::size_t d_model,
                         bool scan_values) {
  const std::string name = std::string(group) + "[" + std::to_string(i) + "]";
  require(w.w1.dimension() == 2 && w.w1.size() != 0, fn, name, ".w1 is empty");
  const std::size_t d_ff = w.w1.shape()[1];
  require_dim(fn, name + ".w1", w.w1, 0, "rows", d_model, "d_model, the columns of x");
  require_dim(fn, name + ".w2", w.w2, 0, "rows", d_model, "d_model, the columns of x");
  require_dim(fn, name + ".w2", w.w2, 1, "columns", d_ff, "d_ff, the columns of w1");
  require_dim(fn, name + ".w3", w.w3, 0, "rows", d_ff, "d_ff, the columns of w1");
  require_dim(fn, name + ".w3", w.w3, 1, "columns", d_model, "d_model");
  if (scan_values) {
    require_finite(fn, name + ".w1", w.w1);
    require_finite(fn, name + ".w2", w.w2);
    require_finite(fn, name + ".w3", w.w3);
  }
  return d_ff;
}

}  // namespace

std::size_t validate_moe(const char* fn, const Tensor2& x, const MoeWeights& w, bool scan_values) {
  require_nonempty(fn, "x", x);
  require(!w.experts.empty(), fn, "w.experts is empty: an MoE layer needs at least one routed expert");
  const std::size_t d_model = x.shape()[1], num_experts = w.experts.size();
  require_dim(fn, "w.router", w.router, 0, "rows", d_model, "d_model, the columns of x");
  require_dim(fn, "w.router", w.router, 1, "columns", num_experts, "num_experts, the number of routed experts");
  std::size_t d_ff = 0;
  for (std::size_t e = 0; e < num_experts; ++e) {
    const std::size_t f = check_expert(fn, "experts", e, w.experts[e], d_model, scan_values);
    if (e == 0) d_ff = f;
    require(f == d_ff, fn, "experts[", e, "] has d_ff ", f, ", experts[0] ", d_ff, ": routed experts must be one size");
  }
  for (std::size_t s = 0; s < w.shared.size(); ++s) check_expert(fn, "shared", s, w.shared[s], d_model, scan_values);
  if (scan_values) {
    require_finite(fn, "x", x);
    require_finite(fn, "w.router", w.router);
  }
  return d_ff;
}

void validate_routing(const char* fn, const Routing& r, std::size_t tokens, std::size_t num_experts) {
  require(r.tokens == tokens, fn, "the routing is for ", r.tokens, " tokens, x has ", tokens);
  require(r.num_experts == num_experts, fn, "the routing is for ", r.num_experts, " experts, the layer has ", num_experts);
  require(r.expert.size() == r.token.size() && r.gate.size() == r.token.size(), fn, "the routing's lists differ in length: ",
          r.token.size(), " tokens, ", r.expert.size(), " experts, ", r.gate.size(), " gates");
  for (std::size_t a = 0; a < r.size(); ++a) {
    require(r.token[a] < tokens, fn, "routing.token[", a, "] = ", r.token[a], " is not a token (there are ", tokens, ")");
    require(r.expert[a] < num_experts, fn, "routing.expert[", a, "] = ", r.expert[a], " is not an expert (there are ",
            num_experts, ")");
    require(std::isfinite(r.gate[a]), fn, "routing.gate[", a, "] is not finite (", r.gate[a], ")");
  }
}

void require_finite_logits(const char* fn, const Tensor2& logits) {
  require_nonempty(fn, "logits", logits);
  for (std::size_t t = 0; t < logits.shape()[0]; ++t)
    for (std::size_t e = 0; e < logits.shape()[1]; ++e)
      require(std::isfinite(logits(t, e)), fn, "the router's logit for token ", t, ", expert ", e, " is not finite (",
              logits(t, e), ")");
}

std::vector<std::size_t> expert_load(const Routing& r) {
  std::vector<std::size_t> load(r.num_experts, 0);
  for (std::size_t e : r.expert)
    if (e < r.num_experts) ++load[e];
  return load;
}

}  // namespace tvlab

#include "tvlab/opt/moe_dispatch.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace tvlab::opt {

ExpertBatches group_by_expert(const Routing& r, std::size_t num_shared) {
  const std::size_t num_experts = r.num_experts, tokens = r.tokens, all = num_experts + num_shared;
  ExpertBatches b;
  // first[e + 1] = the number of rows of expert e, then prefix sums
  b.first.assign(all + 1, 0);
  for (std::size_t e : r.expert) ++b.first[e + 1];
  for (std::size_t s = 0; s < num_shared; ++s) b.first[num_experts + s + 1] = tokens;
  for (std::size_t e = 0; e < all; ++e) b.first[e + 1] += b.first[e];
  // each assignment to the next free row of its expert: stable
  b.token.resize(b.first[all]);
  b.row_of.resize(r.size());
  std::vector<std::size_t> next(b.first.begin(), b.first.end() - 1);
  for (std::size_t a = 0; a < r.size(); ++a) {
    const std::size_t row = next[r.expert[a]]++;
    b.token[row] = r.token[a];
    b.row_of[a] = row;
  }
  for (std::size_t s = 0; s < num_shared; ++s)
    for (std::size_t t = 0; t < tokens; ++t) b.token[b.first[num_experts + s] + t] = t;
  return b;
}

void gather_rows(const Tensor2& x, const ExpertBatches& b, std::size_t begin, std::size_t end, float* out) {
  const std::size_t d_model = x.shape()[1];
  for (std::size_t i = begin; i < end; ++i) std::copy_n(&x(b.token[i], 0), d_model, out + (i - begin) * d_model);
}

Tensor2 combine_rows(const std::vector<float>& expert_out, const ExpertBatches& b, const Routing& r, std::size_t num_shared,
                     std::size_t d_model, bool& finite) {
  const std::size_t tokens = r.tokens;
  // the assignments grouped by token (a counting sort), so that each thread owns whole tokens
  std::vector<std::size_t> token_first(tokens + 1, 0), by_token(r.size());
  for (std::size_t t : r.token) ++token_first[t + 1];
  for (std::size_t t = 0; t < tokens; ++t) token_first[t + 1] += token_first[t];
  {
    std::vector<std::size_t> next(token_first.begin(), token_first.end() - 1);
    for (std::size_t a = 0; a < r.size(); ++a) by_token[next[r.token[a]]++] = a;
  }
  Tensor2 y = xt::zeros<float>({tokens, d_model});
  bool all_finite = true;
#pragma omp parallel for schedule(static) reduction(&& : all_finite)
  for (std::ptrdiff_t ti = 0; ti < static_cast<std::ptrdiff_t>(tokens); ++ti) {
    const std::size_t t = static_cast<std::size_t>(ti);
    float* out = &y(t, 0);
    // y_t = sum_a g_a Y[row(a)], in the routing's order, then the shared experts' rows
    for (std::size_t i = token_first[t]; i < token_first[t + 1]; ++i) {
      const std::size_t a = by_token[i];
      const float g = r.gate[a];
      const float* row = expert_out.data() + b.row_of[a] * d_model;
      for (std::size_t c = 0; c < d_model; ++c) out[c] += g * row[c];
    }
    for (std::size_t s = 0; s < num_shared; ++s) {
      const float* row = expert_out.data() + (b.first[r.num_experts + s] + t) * d_model;
      for (std::size_t c = 0; c < d_model; ++c) out[c] += row[c];
    }
    for (std::size_t c = 0; c < d_model; ++c) all_finite = all_finite && std::isfinite(out[c]);
  }
  finite = all_finite;
  return y;
}

}  // namespace tvlab::opt

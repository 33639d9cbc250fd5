#include "tvlab/analysis/compression.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/analysis/low_rank.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::analysis {

LowRankFactors low_rank_factors(const DTensor2& w, std::size_t rank) {
  const char* fn = "low_rank_factors";
  require(w.dimension() == 2 && w.size() > 0, fn, "w must be a non-empty matrix");
  const std::size_t m = w.shape()[0], n = w.shape()[1];
  require(rank >= 1 && rank <= std::min(m, n), fn, "rank (", rank, ") must be between 1 and min(m, n) = ", std::min(m, n));
  require(std::isfinite(xt::sum(xt::abs(w))()), fn, "w has a value that is not finite");
  // W = U diag(sigma) V^T; for a wide W, decompose W^T = U' diag(sigma) V'^T, so U = V', V = U'
  const bool wide = m < n;
  const Svd d = svd(wide ? DTensor2(xt::transpose(w)) : w);
  const DTensor2& u = wide ? d.v : d.u;
  const DTensor2& v = wide ? d.u : d.v;
  LowRankFactors f{DTensor2::from_shape({m, rank}), DTensor2::from_shape({rank, n}), d.sigma};
  for (std::size_t k = 0; k < rank; ++k) {
    for (std::size_t i = 0; i < m; ++i) f.left(i, k) = u(i, k) * d.sigma[k];  // L = U_r diag(sigma_r)
    for (std::size_t j = 0; j < n; ++j) f.right(k, j) = v(j, k);             // R = V_r^T
  }
  return f;
}

std::vector<LowRankRow> low_rank_table(const DTensor2& w, const std::vector<std::size_t>& ranks) {
  const std::size_t m = w.shape()[0], n = w.shape()[1];
  double norm_sq = 0.0;
  for (double x : w) norm_sq += x * x;
  std::size_t largest = 0;
  for (std::size_t r : ranks) largest = std::max(largest, r);
  const LowRankFactors f = low_rank_factors(w, largest);  // one decomposition: rank r uses its first r terms
  std::vector<LowRankRow> rows;
  for (std::size_t r : ranks) {
    require(r >= 1, "low_rank_table", "a rank of 0 was asked for");
    // ||W - L R||_F, from the product itself
    double err_sq = 0.0;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double product = 0.0;
        for (std::size_t k = 0; k < r; ++k) product += f.left(i, k) * f.right(k, j);
        err_sq += (w(i, j) - product) * (w(i, j) - product);
      }
    rows.push_back({r, static_cast<double>(m * n) / static_cast<double>(r * (m + n)), std::sqrt(err_sq / norm_sq)});
  }
  return rows;
}

long long encoder_parameters(const EncoderShape& s, bool share_layers) {
  const char* fn = "encoder_parameters";
  require(s.vocab_size > 0 && s.hidden_size > 0 && s.num_hidden_layers > 0 && s.intermediate_size > 0 &&
              s.max_position_embeddings > 0 && s.type_vocab_size > 0 && s.embedding_size >= 0,
          fn, "every size must be positive (embedding_size may be 0: no factorisation)");
  const long long H = s.hidden_size, F = s.intermediate_size;
  const long long E = s.embedding_size > 0 ? s.embedding_size : H;
  // word, position and type embeddings of width E, their LayerNorm, and E -> H when factorised
  long long embeddings = (s.vocab_size + s.max_position_embeddings + s.type_vocab_size) * E + 2 * E;
  if (E != H) embeddings += E * H + H;
  // per layer: Q, K, V, O with biases; the FFN's two matrices with biases; two LayerNorms
  const long long layer = 4 * (H * H + H) + (2 * H * F + F + H) + 2 * (2 * H);
  const long long pooler = H * H + H;
  return embeddings + (share_layers ? 1 : s.num_hidden_layers) * layer + pooler;
}

}  // namespace tvlab::analysis

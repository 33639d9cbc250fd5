#include "attention_oracle.hpp"

#include <cmath>
#include <limits>

namespace tvlab::testing {
namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// i' as a signed number: the query's position among the keys.
long long position_oracle(const AttentionMask& mask, std::size_t n_q, std::size_t n_k, std::size_t i) {
  const auto shift = mask.causal_align == CausalAlign::bottom_right
                         ? static_cast<long long>(n_k) - static_cast<long long>(n_q)
                         : 0LL;
  return static_cast<long long>(i) + shift;
}

}  // namespace

bool mask_allows_oracle(const AttentionMask& mask, std::size_t n_q, std::size_t n_k, std::size_t i, std::size_t j) {
  const long long p = position_oracle(mask, n_q, n_k, i), key = static_cast<long long>(j);
  const bool causal_ok = !mask.causal || key <= p;
  // Widths are compared as doubles so that huge widths ("no limit") cannot overflow.
  const bool window_ok = !mask.window || (static_cast<double>(key) >= static_cast<double>(p) - static_cast<double>(mask.window->left) &&
                                          static_cast<double>(key) <= static_cast<double>(p) + static_cast<double>(mask.window->right));
  const bool boolean_ok = !mask.allowed || (*mask.allowed)(i, j);
  return causal_ok && window_ok && boolean_ok;
}

std::string first_unsupported_part(const AttentionMask& mask, const MaskSupport& supported) {
  const bool positions = mask.causal || mask.window || mask.alibi_slopes;
  if (mask.causal && !supported.causal) return "causal";
  if (mask.window && !supported.window) return "window";
  if (positions && mask.causal_align == CausalAlign::top_left && !supported.top_left) return "causal_align = top_left";
  if (mask.allowed && !supported.allowed) return "allowed";
  if (mask.bias && !supported.bias) return "bias";
  if (mask.alibi_slopes && !supported.alibi) return "alibi_slopes";
  return "";
}

DTensor2 masked_scores_oracle(const Tensor3& q, const Tensor3& k, const AttentionConfig& cfg, std::size_t h) {
  const std::size_t nq = q.shape()[1], nk = k.shape()[1], d = q.shape()[2];
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  const AttentionMask& mask = cfg.mask;
  DTensor2 s = DTensor2::from_shape({nq, nk});
  for (std::size_t i = 0; i < nq; ++i)
    for (std::size_t j = 0; j < nk; ++j) {
      double dot = 0.0;
      for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(q(h, i, c)) * static_cast<double>(k(h, j, c));
      double value = scale * dot;
      if (mask.bias) value += (*mask.bias)(i, j);
      if (mask.alibi_slopes) {
        const double distance = static_cast<double>(position_oracle(mask, nq, nk, i)) - static_cast<double>(j);
        value -= (*mask.alibi_slopes)(h) * std::fabs(distance);
      }
      s(i, j) = mask_allows_oracle(mask, nq, nk, i, j) ? value : kNegInf;
    }
  return s;
}

// softmax_j = exp(x_j - lse), lse = m + log(sum exp(x - m)).
DTensor2 softmax_oracle(const Tensor2& x) {
  DTensor2 y = DTensor2::from_shape({x.shape()[0], x.shape()[1]});
  for (std::size_t i = 0; i < x.shape()[0]; ++i) {
    double m = kNegInf;
    for (std::size_t j = 0; j < x.shape()[1]; ++j) m = std::max(m, static_cast<double>(x(i, j)));
    double sum = 0.0;
    for (std::size_t j = 0; j < x.shape()[1]; ++j) sum += (m == kNegInf) ? 0.0 : std::exp(x(i, j) - m);
    const double lse = m + std::log(sum);
    for (std::size_t j = 0; j < x.shape()[1]; ++j) y(i, j) = (m == kNegInf) ? 0.0 : std::exp(x(i, j) - lse);
  }
  return y;
}

DTensor3 sdpa_oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg) {
  const std::size_t heads = q.shape()[0], nq = q.shape()[1], nk = k.shape()[1], dv = v.shape()[2];
  DTensor3 out = xt::zeros<double>({heads, nq, dv});
  for (std::size_t h = 0; h < heads; ++h) {
    const DTensor2 s = masked_scores_oracle(q, k, cfg, h);
    for (std::size_t i = 0; i < nq; ++i) {
      double m = kNegInf;
      for (std::size_t j = 0; j < nk; ++j) m = std::max(m, s(i, j));
      if (m == kNegInf) continue;  // fully masked: zeros
      double lse = 0.0;
      for (std::size_t j = 0; j < nk; ++j) lse += std::exp(s(i, j) - m);
      lse = m + std::log(lse);
      for (std::size_t j = 0; j < nk; ++j) {
        const double p = std::exp(s(i, j) - lse);
        for (std::size_t c = 0; c < dv; ++c) out(h, i, c) += p * static_cast<double>(v(h, j, c));
      }
    }
  }
  return out;
}

double score_magnitude(const Tensor3& q, const Tensor3& k, const AttentionConfig& cfg) {
  const std::size_t nq = q.shape()[1], nk = k.shape()[1];
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.shape()[2])));
  double worst = 0.0;
  for (std::size_t h = 0; h < q.shape()[0]; ++h)
    for (std::size_t i = 0; i < nq; ++i)
      for (std::size_t j = 0; j < nk; ++j) {
        double sum = 0.0;
        for (std::size_t c = 0; c < q.shape()[2]; ++c) sum += std::fabs(q(h, i, c) * k(h, j, c));
        // The bias terms are added in float too: their size counts (finite ones only).
        double bias = cfg.mask.bias && std::isfinite((*cfg.mask.bias)(i, j)) ? std::fabs((*cfg.mask.bias)(i, j)) : 0.0;
        if (cfg.mask.alibi_slopes)
          bias += (*cfg.mask.alibi_slopes)(h) *
                  std::fabs(static_cast<double>(position_oracle(cfg.mask, nq, nk, i)) - static_cast<double>(j));
        worst = std::max(worst, scale * sum + bias);
      }
  return worst;
}

DTensor2 mha_oracle(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w, int num_heads,
                    const AttentionConfig& cfg) {
  const std::size_t heads = static_cast<std::size_t>(num_heads), inner = w.w_q.shape()[1], dk = inner / heads;
  const std::size_t nq = x_q.shape()[0], nk = x_kv.shape()[0], dm = x_q.shape()[1];
  // Project in double, then round to float tensors only to reuse sdpa_oracle's signature would
  // lose precision; instead do the whole computation in double here.
  auto project = [&](const Tensor2& x, const Tensor2& wt, std::size_t n) {
    DTensor3 t = xt::zeros<double>({heads, n, dk});
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t col = 0; col < inner; ++col) {
        double acc = 0.0;
        for (std::size_t c = 0; c < dm; ++c) acc += static_cast<double>(x(i, c)) * wt(c, col);
        t(col / dk, i, col % dk) = acc;
      }
    return t;
  };
  const DTensor3 q = project(x_q, w.w_q, nq), k = project(x_kv, w.w_k, nk), v = project(x_kv, w.w_v, nk);
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(dk)));
  DTensor2 concat = xt::zeros<double>({nq, inner});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < nq; ++i) {
      std::vector<double> s(nk, kNegInf);
      double m = kNegInf;
      for (std::size_t j = 0; j < nk; ++j) {
        if (!mask_allows_oracle(cfg.mask, nq, nk, i, j)) continue;
        double dot = 0.0;
        for (std::size_t c = 0; c < dk; ++c) dot += q(h, i, c) * k(h, j, c);
        s[j] = scale * dot + (cfg.mask.bias ? (*cfg.mask.bias)(i, j) : 0.0);
        if (cfg.mask.alibi_slopes)
          s[j] -= (*cfg.mask.alibi_slopes)(h) *
                  std::fabs(static_cast<double>(position_oracle(cfg.mask, nq, nk, i)) - static_cast<double>(j));
        m = std::max(m, s[j]);
      }
      if (m == kNegInf) continue;
      double l = 0.0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (std::size_t j = 0; j < nk; ++j)
        for (std::size_t c = 0; c < dk; ++c) concat(i, h * dk + c) += s[j] / l * v(h, j, c);
    }
  DTensor2 y = xt::zeros<double>({nq, dm});
  for (std::size_t i = 0; i < nq; ++i)
    for (std::size_t c = 0; c < dm; ++c)
      for (std::size_t r = 0; r < inner; ++r) y(i, c) += concat(i, r) * w.w_o(r, c);
  return y;
}

}  // namespace tvlab::testing

#include "tvlab/opt/window_kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab::opt {
namespace {

// Checks that x is [heads, dim] and finite, naming `name`.
void require_token(const char* fn, const char* name, const Tensor2& x, std::size_t heads, std::size_t dim,
                   const char* dim_name) {
  require(x.shape()[0] == heads && x.shape()[1] == dim, fn, name, " has shape ", shape_string_of(x), ", expected [",
          heads, ", ", dim, "] (heads, ", dim_name, ")");
  require_finite(fn, name, x);
}

}  // namespace

WindowKvCache::WindowKvCache(std::size_t heads, std::size_t head_dim, std::size_t head_dim_v, long long window)
    : heads_(heads), head_dim_(head_dim), head_dim_v_(head_dim_v), window_(0) {
  const char* fn = "WindowKvCache";
  require_positive(fn, "heads", heads);
  require_positive(fn, "head_dim", head_dim);
  require_positive(fn, "head_dim_v", head_dim_v);
  require(window >= 1, fn, "window (", window, ") must be >= 1: the query's own position is always visible");
  window_ = static_cast<std::size_t>(window);
  keys_.assign(checked_element_count(fn, {heads, window_, head_dim}), 0.0f);
  values_.assign(checked_element_count(fn, {heads, window_, head_dim_v}), 0.0f);
  slot_max_.assign(window_, 0.0);
}

void WindowKvCache::append(const Tensor2& k_t, const Tensor2& v_t) {
  const char* fn = "WindowKvCache::append";
  require_token(fn, "k_t", k_t, heads_, head_dim_, "head_dim");
  require_token(fn, "v_t", v_t, heads_, head_dim_v_, "head_dim_v");
  // Position t goes to slot t mod w, where position t - w was: no later query sees that one.
  const std::size_t slot = tokens_ % window_;
  slot_max_[slot] = static_cast<double>(xt::amax(xt::abs(k_t))());
  for (std::size_t h = 0; h < heads_; ++h) {
    std::copy_n(k_t.data() + h * head_dim_, head_dim_, keys_.data() + (h * window_ + slot) * head_dim_);
    std::copy_n(v_t.data() + h * head_dim_v_, head_dim_v_, values_.data() + (h * window_ + slot) * head_dim_v_);
  }
  ++tokens_;
}

Tensor2 WindowKvCache::attend(const Tensor2& q_t, std::optional<double> scale_option) const {
  const char* fn = "WindowKvCache::attend";
  require(tokens_ > 0, fn, "the cache is empty: append the position's k_t and v_t before attending");
  require_token(fn, "q_t", q_t, heads_, head_dim_, "head_dim");
  const double scale_value = scale_option.value_or(1.0 / std::sqrt(static_cast<double>(head_dim_)));
  require(std::isfinite(scale_value) && scale_value > 0.0 && scale_value <= std::numeric_limits<float>::max(), fn,
          "scale (", scale_value, ") must be positive and representable in float");
  const auto scale = static_cast<float>(scale_value);
  const std::size_t held = size(), d = head_dim_, d_v = head_dim_v_;
  // As every attention of the project: scale |q . k| <= scale d max|q| max|k| must stay inside
  // float's range, or a score would overflow to infinity (1e38 leaves room for rounding).
  double q_max = 0.0;
  for (float x : q_t) q_max = std::max(q_max, static_cast<double>(std::fabs(x)));
  const double k_max = *std::max_element(slot_max_.begin(), slot_max_.begin() + static_cast<std::ptrdiff_t>(held));
  const double dot_bound = static_cast<double>(d) * q_max * k_max;
  require(dot_bound <= 1e38 && scale_value * dot_bound <= 1e38, fn, "q_t and the cached keys are too large: ",
          "scale * q . k could reach ", scale_value * dot_bound, ", beyond float's range (3.4e38); scale them down");
  Tensor2 out = xt::zeros<float>({heads_, d_v});
  std::vector<float> s(held);
  for (std::size_t h = 0; h < heads_; ++h) {
    const float* q = q_t.data() + h * d;
    const float* keys = keys_.data() + h * window_ * d;
    const float* values = values_.data() + h * window_ * d_v;
    // s_j = scale q . k_j over the held slots, and m = max_j s_j
    float m = -std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < held; ++j) {
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (std::size_t e = 0; e < d; ++e) dot += q[e] * keys[j * d + e];
      s[j] = scale * dot;
      m = std::max(m, s[j]);
    }
    // p_j = e^{s_j - m}, l = sum_j p_j;  o = sum_j p_j v_j / l
    float l = 0.0f;
    float* o = out.data() + h * d_v;
    for (std::size_t j = 0; j < held; ++j) {
      const float p = std::exp(s[j] - m);
      l += p;
#pragma omp simd
      for (std::size_t e = 0; e < d_v; ++e) o[e] += p * values[j * d_v + e];
    }
    const float inv_l = 1.0f / l;
#pragma omp simd
    for (std::size_t e = 0; e < d_v; ++e) o[e] *= inv_l;
  }
  return out;
}

}  // namespace tvlab::opt

// Chapter 05's grouped attention (the attention of a prefill: h query heads over g shared key/value
// heads, whole sequences) on every backend of the registry that provides it, against a
// double-precision oracle written from the formula: MHA (g = h), GQA and MQA (g = 1) shapes, self and
// cross attention (n_q != n_k, down to a decode-like single query), d_v != d, with no mask, the
// causal rule, sliding windows and ALiBi. Then the bad inputs: each backend refuses them with a
// message naming the parameter, the reference's message word for word, and refuses by name the
// parts of a mask it does not implement.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "kv_test_helpers.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::kv {
namespace {

using tvlab::ch05_testing::error_of;
using tvlab::testing::first_unsupported_part;
using tvlab::testing::mask_allows_oracle;
using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

enum class MaskKind { none, causal, causal_window, two_sided_window_top_left, alibi, causal_alibi };

struct GroupedCase {
  const char* label;
  std::size_t heads, kv_heads, seq_q, seq_k, head_dim, head_dim_v;
  MaskKind mask;
};
void PrintTo(const GroupedCase& c, std::ostream* out) { *out << c.label; }

// ALiBi's slopes for h heads, m_t = 2^{-8(t+1)/h} (Press et al. 2022; any slopes >= 0 would do).
DTensor1 alibi_slopes(std::size_t heads) {
  DTensor1 m = xt::zeros<double>({heads});
  for (std::size_t t = 0; t < heads; ++t) m(t) = std::pow(2.0, -8.0 * static_cast<double>(t + 1) / heads);
  return m;
}

AttentionMask make_mask(const GroupedCase& c) {
  AttentionMask mask;
  switch (c.mask) {
    case MaskKind::none: break;
    case MaskKind::causal: mask.causal = true; break;
    case MaskKind::causal_window:  // a causal sliding window of 4 keys: the query's own and 3 before it
      mask.causal = true;
      mask.window = SlidingWindow{3, 0};
      break;
    case MaskKind::two_sided_window_top_left:
      mask.window = SlidingWindow{1, 1};
      mask.causal_align = CausalAlign::top_left;
      break;
    case MaskKind::alibi: mask.alibi_slopes = alibi_slopes(c.heads); break;
    case MaskKind::causal_alibi:
      mask.causal = true;
      mask.alibi_slopes = alibi_slopes(c.heads);
      break;
  }
  return mask;
}

// The oracle, from the definition, in double: query head t reads kv head kappa(t) = t / (h/g);
//   s_tij = scale q_ti . k_kappa(t)j - m_t |i' - j|  where the mask allows key j, -inf elsewhere,
//   o_ti = sum_j softmax_j(s_ti) v_kappa(t)j,  and o_ti = 0 when no key is allowed.
// i' is i (top_left) or i + n_k - n_q (bottom_right). `magnitude` returns the largest
// scale sum_d |q_tid k_jd| + m_t |i' - j|: the size of a score's terms, which bounds its float error.
struct Oracle {
  DTensor3 out;
  double magnitude = 0.0;
};
Oracle grouped_oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionMask& mask, double scale) {
  const std::size_t h = q.shape()[0], n_q = q.shape()[1], d = q.shape()[2];
  const std::size_t g = k.shape()[0], n_k = k.shape()[1], d_v = v.shape()[2];
  Oracle o{xt::zeros<double>({h, n_q, d_v})};
  std::vector<double> s(n_k);
  for (std::size_t t = 0; t < h; ++t) {
    const std::size_t kv = t / (h / g);
    const double slope = mask.alibi_slopes ? (*mask.alibi_slopes)(t) : 0.0;
    for (std::size_t i = 0; i < n_q; ++i) {
      const long long position =
          static_cast<long long>(i) +
          (mask.causal_align == CausalAlign::top_left ? 0 : static_cast<long long>(n_k) - static_cast<long long>(n_q));
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < n_k; ++j) {
        double dot = 0.0, size = 0.0;
        for (std::size_t e = 0; e < d; ++e) {
          dot += static_cast<double>(q(t, i, e)) * k(kv, j, e);
          size += std::abs(static_cast<double>(q(t, i, e)) * k(kv, j, e));
        }
        const double distance = static_cast<double>(std::llabs(position - static_cast<long long>(j)));
        if (!mask_allows_oracle(mask, n_q, n_k, i, j)) {
          s[j] = -std::numeric_limits<double>::infinity();
          continue;
        }
        s[j] = scale * dot - slope * distance;
        o.magnitude = std::max(o.magnitude, scale * size + slope * distance);
        m = std::max(m, s[j]);
      }
      if (m == -std::numeric_limits<double>::infinity()) continue;  // no key: the output stays 0
      double sum = 0.0;
      for (std::size_t j = 0; j < n_k; ++j) sum += std::exp(s[j] - m);
      for (std::size_t j = 0; j < n_k; ++j)
        for (std::size_t e = 0; e < d_v; ++e) o.out(t, i, e) += std::exp(s[j] - m) / sum * v(kv, j, e);
    }
  }
  return o;
}

struct Inputs {
  Tensor3 q, k, v;
};
Inputs make_inputs(const GroupedCase& c, std::uint64_t seed) {
  Rng rng(seed);
  Inputs in{rng.normal_tensor(c.heads, c.seq_q, c.head_dim), rng.normal_tensor(c.kv_heads, c.seq_k, c.head_dim),
            rng.normal_tensor(c.kv_heads, c.seq_k, c.head_dim_v)};
  in.k(c.kv_heads - 1, c.seq_k - 1, 0) *= 6.0f;  // an outlier key, so that the softmax is not flat
  return in;
}

class GqaAttentionCases : public ::testing::TestWithParam<std::tuple<Backend, GroupedCase>> {};

TEST_P(GqaAttentionCases, matches_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 3100 + c.heads * 31 + c.kv_heads * 7 + c.seq_q * 3 + c.seq_k;
  const Inputs in = make_inputs(c, seed);
  AttentionConfig cfg;
  cfg.mask = make_mask(c);
  ASSERT_EQ(first_unsupported_part(cfg.mask, backend.caps.masks), "")
      << backend.name << " lists no support for this case's mask (GqaAttentionErrors tests its refusal)";
  for (const std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.3}}) {
    cfg.scale = scale;
    const Oracle oracle =
        grouped_oracle(in.q, in.k, in.v, cfg.mask, scale.value_or(1.0 / std::sqrt(static_cast<double>(c.head_dim))));
    const Tensor3 got = backend.gqa_attention(in.q, in.k, in.v, cfg);
    // As chapter 00's attention in float: rtol = reduction_rtol(K), K = max(d, n_k), and
    // atol = rtol max|v| (2M + 1) with M the size of a score's terms (attention_tolerance).
    const double rtol = reduction_rtol(std::max(c.head_dim, c.seq_k));
    const double atol = attention_tolerance(c.head_dim, c.seq_k, oracle.magnitude, xt::amax(xt::abs(in.v))());
    EXPECT_TRUE(matches(got, oracle.out, {atol, rtol},
                        {std::string("grouped_scaled_dot_product_attention, ") + c.label + ", scale " +
                             (scale ? std::to_string(*scale) : std::string("1/sqrt(d)")),
                         {"t", "i", "e"},
                         seed,
                         "",
                         "query head t reads kv head t / (h/g) (h/g consecutive query heads share one; ALiBi's "
                         "slope is the query head's); a query that sees no key gives 0"}));
  }
}

const GroupedCase kCases[] = {
    {"MHA h 4 g 4, 9 x 9, d 8, causal", 4, 4, 9, 9, 8, 8, MaskKind::causal},
    {"GQA h 4 g 2, 7 queries over 13 keys, d 8, d_v 5, no mask", 4, 2, 7, 13, 8, 5, MaskKind::none},
    {"MQA h 4 g 1, 1 query over 33 keys, d 16, causal", 4, 1, 1, 33, 16, 16, MaskKind::causal},
    {"MQA h 4 g 1, 12 queries over 7 keys, window 1 + 1 top-left (the last rows see nothing)", 4, 1, 12, 7, 4, 6,
     MaskKind::two_sided_window_top_left},
    {"GQA h 6 g 3, 12 queries over 20 keys, d 5, d_v 7, causal window of 4 keys", 6, 3, 12, 20, 5, 7,
     MaskKind::causal_window},
    {"GQA h 8 g 2, 10 x 10, d 8, d_v 6, ALiBi", 8, 2, 10, 10, 8, 6, MaskKind::alibi},
    {"GQA h 8 g 2, 1 query over 50 keys, d 32, causal ALiBi", 8, 2, 1, 50, 32, 32, MaskKind::causal_alibi},
    {"GQA h 8 g 2, 129 x 129, d 64, causal", 8, 2, 129, 129, 64, 64, MaskKind::causal},
};
INSTANTIATE_TEST_SUITE_P(Ch05, GqaAttentionCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::gqa_attention)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GqaAttentionCases);  // not an exercise

class GqaAttentionErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(GqaAttentionErrors, bad_input_names_the_parameter_with_the_reference_message) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Backend& reference = reference_backend(backends());
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 5, 6, 8, 8, MaskKind::none}, 11);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor3 q_nan = in.q, k_inf = in.k, v_nan = in.v;
  q_nan(3, 4, 7) = nan;
  k_inf(1, 2, 0) = std::numeric_limits<float>::infinity();
  v_nan(0, 5, 3) = nan;
  const Tensor3 k_three_heads = Rng(12).normal_tensor(3, 6, 8), v_three_heads = Rng(13).normal_tensor(3, 6, 8);
  const Tensor3 k_narrow = xt::view(in.k, xt::all(), xt::all(), xt::range(0, 7));
  const Tensor3 v_short = xt::view(in.v, xt::all(), xt::range(0, 5), xt::all());
  const Tensor3 v_one_head = xt::view(in.v, xt::range(0, 1), xt::all(), xt::all());
  AttentionConfig negative_scale, few_slopes, wrong_bias, negative_window;
  negative_scale.scale = -1.0;
  few_slopes.mask.alibi_slopes = alibi_slopes(2);  // 2 slopes for 4 query heads
  wrong_bias.mask.bias = Tensor2(xt::zeros<float>({5, 5}));  // [seq_q, seq_k] is [5, 6]
  negative_window.mask.window = SlidingWindow{-1, 0};
  struct Bad {
    const char* what;
    const Tensor3 &q, &k, &v;
    AttentionConfig cfg;
    std::vector<std::string> names;
  };
  const std::vector<Bad> bad = {
      {"g = 3 does not divide h = 4", in.q, k_three_heads, v_three_heads, {}, {"num_kv_heads", "num_heads"}},
      {"k of head_dim 7, q of 8", in.q, k_narrow, in.v, {}, {"k has head_dim 7", "expected 8"}},
      {"v of 5 rows, k of 6", in.q, in.k, v_short, {}, {"v has seq 5", "expected 6"}},
      {"v of 1 head, k of 2", in.q, in.k, v_one_head, {}, {"v has heads 1", "expected 2"}},
      {"NaN in q", q_nan, in.k, in.v, {}, {"q", "non-finite"}},
      {"inf in k", in.q, k_inf, in.v, {}, {"k has a non-finite value at (1, 2, 0)"}},
      {"NaN in v", in.q, in.k, v_nan, {}, {"v has a non-finite value at (0, 5, 3)"}},
      {"scale -1", in.q, in.k, in.v, negative_scale, {"scale (-1)"}},
      {"2 ALiBi slopes for 4 query heads", in.q, in.k, in.v, few_slopes, {"mask.alibi_slopes"}},
      {"a [5, 5] bias for 5 queries over 6 keys", in.q, in.k, in.v, wrong_bias, {"mask.bias"}},
      {"a window of -1 keys", in.q, in.k, in.v, negative_window, {"mask.window.left"}},
  };
  for (const Bad& b : bad) {
    const auto call = [&backend, &b] { backend.gqa_attention(b.q, b.k, b.v, b.cfg); };
    std::vector<std::string> names = b.names;
    names.insert(names.begin(), "grouped_scaled_dot_product_attention");
    EXPECT_TRUE(throws_error_naming(call, names)) << b.what;
    // The optimized versions make the reference's checks (ref::validate_grouped_attention).
    EXPECT_EQ(error_of(call), error_of([&reference, &b] { reference.gqa_attention(b.q, b.k, b.v, b.cfg); }))
        << b.what << ": " << backend.name << "'s message differs from the reference's";
  }
}

// Every part of a mask, alone: a backend computes it (the suite above checks the values of those
// it lists) or refuses it naming the part, before any work.
TEST_P(GqaAttentionErrors, a_mask_part_is_computed_or_refused_by_name) {
  const Backend& backend = GetParam();
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 5, 6, 8, 8, MaskKind::none}, 14);
  std::vector<std::pair<const char*, AttentionMask>> parts(6);
  parts[0] = {"causal", {}};
  parts[0].second.causal = true;
  parts[1] = {"causal top-left", {}};
  parts[1].second.causal = true;
  parts[1].second.causal_align = CausalAlign::top_left;
  parts[2] = {"window", {}};
  parts[2].second.window = SlidingWindow{2, 1};
  parts[3] = {"boolean mask", {}};
  parts[3].second.allowed = Mask2(xt::ones<bool>({5, 6}));
  parts[4] = {"bias", {}};
  parts[4].second.bias = Tensor2(xt::zeros<float>({5, 6}));
  parts[5] = {"ALiBi", {}};
  parts[5].second.alibi_slopes = alibi_slopes(4);
  for (const auto& [name, mask] : parts) {
    AttentionConfig cfg;
    cfg.mask = mask;
    const auto call = [&] { backend.gqa_attention(in.q, in.k, in.v, cfg); };
    const std::string missing = first_unsupported_part(mask, backend.caps.masks);
    if (!missing.empty()) {  // refused before any device work: checked without a GPU too
      EXPECT_TRUE(throws_error_naming(call, {"grouped_scaled_dot_product_attention", "mask." + missing, "not supported"}))
          << name << ": " << backend.name << " does not list it in caps.masks";
      continue;
    }
    if (unavailable_reason(backend.caps)) continue;
    EXPECT_NO_THROW(call()) << name << ": " << backend.name << " lists it in caps.masks";
  }
}

INSTANTIATE_TEST_SUITE_P(Ch05, GqaAttentionErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::gqa_attention)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GqaAttentionErrors);  // not an exercise

}  // namespace
}  // namespace tvlab::kv

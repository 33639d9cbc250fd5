// Chapter 00 suites, run over every implementation in the registry (ref, opt, cuda — or student):
// equivalence with a double oracle, properties, and bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "../common/attention_oracle.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::ch00 {
namespace {

using tvlab::testing::Context;
using tvlab::testing::first_unsupported_part;
using tvlab::testing::masked_scores_oracle;
using tvlab::testing::mha_oracle;
using tvlab::testing::score_magnitude;
using tvlab::testing::sdpa_oracle;
using tvlab::testing::softmax_oracle;
using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

class Softmax : public ::testing::TestWithParam<Backend> {};
class Attention : public ::testing::TestWithParam<Backend> {};
class MultiHead : public ::testing::TestWithParam<Backend> {};

// ------------------------------------------------------------------------------------------ softmax

struct SoftmaxCase {
  const char* label;
  std::size_t rows, cols;
  double magnitude;  // standard deviation of the logits
  int masked_per_row;  // how many -inf entries per row (cols = fully masked)
};

class SoftmaxCases : public ::testing::TestWithParam<std::tuple<Backend, SoftmaxCase>> {};

// The formula, and the mistake each case is there to catch.
std::string softmax_hint(const SoftmaxCase& c) {
  std::string hint = "$y_{ij} = e^{x_{ij} - m_i} / \\sum_k e^{x_{ik} - m_i}$ with $m_i = \\max_k x_{ik}$, the sum in double";
  if (c.magnitude >= 100)
    hint += "; logits of magnitude 1e4 overflow exp unless the row maximum $m_i$ is subtracted first";
  if (c.masked_per_row == static_cast<int>(c.cols))
    hint += "; every entry of these rows is -inf: $m_i = -\\infty$, and the row must come out as zeros, not NaN";
  else if (c.masked_per_row > 0)
    hint += "; a -inf entry gets weight $e^{-\\infty} = 0$";
  return hint;
}

// The worst element's own numbers: the row maximum and the expected weight.
std::string softmax_hint_at(const Tensor2& x, const std::vector<std::size_t>& at) {
  const std::size_t i = at[0], j = at[1];
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < x.shape(1); ++k) m = std::max(m, static_cast<double>(x(i, k)));
  std::ostringstream out;
  out << "row " << i << ", col " << j << ": x = " << x(i, j) << ", row maximum $m_" << i << "$ = " << m;
  if (m == -std::numeric_limits<double>::infinity()) out << " (the whole row is -inf: every output 0)";
  return out.str();
}

TEST_P(SoftmaxCases, matches_oracle) {
  const auto& [impl, c] = GetParam();
  TVLAB_EXERCISE(impl, "00.1");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const unsigned long long seed = 1000 + c.rows * 31 + c.cols;
  Rng rng(seed);
  Tensor2 x = rng.normal_matrix(c.rows, c.cols, 0.0, c.magnitude);
  // One outlier per row so the distribution is peaked, not flat.
  for (std::size_t i = 0; i < c.rows; ++i) x(i, (7 * i) % c.cols) += static_cast<float>(4 * c.magnitude);
  for (std::size_t i = 0; i < c.rows; ++i)
    for (int m = 0; m < c.masked_per_row; ++m) x(i, (i + static_cast<std::size_t>(m) * 3) % c.cols) = kNegInf;
  const Tensor2 y = impl.softmax(x);
  // Row reduction of length cols: weights carry ~eps relative error from exp and the sum.
  const tvlab::Tolerance tol{2e-6, reduction_rtol(c.cols)};
  EXPECT_TRUE(matches(y, softmax_oracle(x), tol,
                      {std::string("softmax, ") + c.label, {"row", "col"}, seed,
                       "tvlab 00_attention_basics --step --backend " + impl.name,
                       softmax_hint(c), [&x](const std::vector<std::size_t>& at) { return softmax_hint_at(x, at); }}));
}

void PrintTo(const SoftmaxCase& c, std::ostream* out) { *out << c.label; }

const SoftmaxCase kSoftmaxCases[] = {
    {"one element", 1, 1, 1.0, 0},
    {"odd width", 5, 13, 2.0, 0},
    {"width not a multiple of the SIMD width", 9, 1001, 3.0, 0},
    {"logits of magnitude 1e4", 4, 64, 1e4, 0},
    {"some -inf entries", 6, 40, 1.0, 3},
    {"fully masked rows", 3, 17, 1.0, 17},
};

INSTANTIATE_TEST_SUITE_P(Ch00, SoftmaxCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::softmax)),
                                            ::testing::ValuesIn(kSoftmaxCases)),
                         tvlab::testing::ImplCaseName());

TEST_P(Softmax, shift_invariant_and_sums_to_one) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "00.1");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  // Small integers: x + 1000 is exact in float, so softmax(x + 1000) must equal softmax(x).
  Tensor2 x = Tensor2::from_shape({4, 37});
  Rng rng(5);
  for (auto& v : x) v = static_cast<float>(std::floor(rng.uniform(-20.0, 20.0)));
  const Tensor2 shifted = x + 1000.0f;
  const Tensor2 a = impl.softmax(x), b = impl.softmax(shifted);
  EXPECT_TRUE(matches(b, xt::eval(xt::cast<double>(a)), {1e-7, 4 * FLT_EPSILON},
                      {"softmax(x + 1000) vs softmax(x), 4 x 37 integer logits in [-20, 20)", {"row", "col"}, 5, "",
                       "$\\mathrm{softmax}(x + c) = \\mathrm{softmax}(x)$ exactly when $x - \\max_k x_k$ is formed "
                       "first (here every $x + 1000$ is exact in float); exp of x + 1000 directly overflows"}));
  for (std::size_t i = 0; i < 4; ++i) {
    double sum = 0.0;
    for (std::size_t j = 0; j < 37; ++j) sum += a(i, j);
    EXPECT_NEAR(sum, 1.0, 37 * FLT_EPSILON) << "softmax of a 4 x 37 input: row " << i << " sums to " << sum
                                              << ", not 1: divide every $e^{x_{ij} - m_i}$ by the row's sum";
  }
}

TEST_P(Softmax, rejects_nan_plus_infinity_and_empty_input) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "00.1");
  EXPECT_TRUE(throws_error_naming([&] { impl.softmax(Tensor2(xt::zeros<float>({0, 3}))); }, {"softmax", "x", "empty"}))
      << "x of shape [0, 3] (no rows): require_nonempty";
  Tensor2 x = xt::zeros<float>({2, 3});
  x(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.softmax(x); }, {"softmax", "x"})) << "x [2, 3] with NaN at (1, 2)";
  x(1, 2) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { impl.softmax(x); }, {"softmax", "x", "inf"}))
      << "x [2, 3] with +inf at (1, 2): only -inf (a masked entry) is allowed";
  // Wide rows, bad value early (column 3): it goes through the SIMD loops, not the scalar tail.
  Tensor2 wide = xt::zeros<float>({2, 40});
  wide(1, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.softmax(wide); }, {"softmax", "x", "nan"})) << "x [2, 40] with NaN at (1, 3)";
  wide(1, 3) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { impl.softmax(wide); }, {"softmax", "x", "inf"})) << "x [2, 40] with +inf at (1, 3)";
  // A NaN among -inf entries (in the SIMD part and in the tail): the maximum may come out as
  // -inf, as for a fully masked row.
  for (std::size_t column : {3, 37}) {
    Tensor2 masked_nan = Tensor2::from_shape({1, 40});
    masked_nan.fill(kNegInf);
    masked_nan(0, column) = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(throws_error_naming([&] { impl.softmax(masked_nan); }, {"softmax", "x", "nan"}))
        << "x [1, 40] all -inf but a NaN at column " << column << ": the maximum can be -inf, the NaN must still be reported";
  }
}

INSTANTIATE_TEST_SUITE_P(Ch00, Softmax, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::softmax)),
                         tvlab::testing::ImplName());

// ---------------------------------------------------------------------------------------- attention

enum class MaskKind { none, causal, boolean_with_empty_row, additive_with_neg_inf };

struct AttentionCase {
  const char* label;
  std::size_t heads, seq_q, seq_k, head_dim, head_dim_v;
  MaskKind mask;
  double magnitude;  // std of q and k entries
};

std::string mask_name(MaskKind m) {
  switch (m) {
    case MaskKind::none: return "no mask";
    case MaskKind::causal: return "causal";
    case MaskKind::boolean_with_empty_row: return "boolean mask with a fully masked row";
    case MaskKind::additive_with_neg_inf: return "additive mask with -inf";
  }
  return "";
}

AttentionConfig make_config(const AttentionCase& c, Rng& rng) {
  AttentionConfig cfg;
  cfg.mask.causal = c.mask == MaskKind::causal;
  if (c.mask == MaskKind::boolean_with_empty_row) {
    Mask2 mask = Mask2::from_shape({c.seq_q, c.seq_k});
    for (auto& m : mask) m = rng.uniform() < 0.7;
    for (std::size_t j = 0; j < c.seq_k; ++j) mask(c.seq_q / 2, j) = false;  // nothing to attend to
    cfg.mask.allowed = mask;
  }
  if (c.mask == MaskKind::additive_with_neg_inf) {
    Tensor2 bias = rng.normal_matrix(c.seq_q, c.seq_k);
    for (std::size_t i = 0; i < c.seq_q; ++i) bias(i, (3 * i) % c.seq_k) = kNegInf;
    cfg.mask.bias = bias;
  }
  return cfg;
}

class AttentionCases : public ::testing::TestWithParam<std::tuple<Backend, AttentionCase>> {};

// The formula, and what the case's mask adds to it.
std::string attention_hint(const AttentionCase& c) {
  std::string hint = "$o_{hi} = \\sum_j p_{hij} v_{hj}$, $p_{hij} = \\mathrm{softmax}_j(s_{hij})$, "
                     "$s_{hij} = q_{hi} \\cdot k_{hj} / \\sqrt{d_k}$ (d_k = " + std::to_string(c.head_dim) + ")";
  switch (c.mask) {
    case MaskKind::none:
      if (c.magnitude > 1) hint += "; scores reach hundreds here: subtract each row's maximum score before exp";
      if (c.seq_q != c.seq_k || c.head_dim != c.head_dim_v)
        hint += "; seq_q != seq_k and d_v != d_k: loop i over q's rows, j over k's, d over v's columns";
      break;
    case MaskKind::causal:
      hint += "; causal: query i sees key j only when $j \\le i + (\\text{seq\\_k} - \\text{seq\\_q})$ "
              "(cfg.mask.allows(i, j, seq_q, seq_k))";
      break;
    case MaskKind::boolean_with_empty_row:
      hint += "; boolean mask: key j counts only where cfg.mask.allows(i, j, seq_q, seq_k); query " +
              std::to_string(c.seq_q / 2) + " may see no key at all and must give output 0, not NaN";
      break;
    case MaskKind::additive_with_neg_inf:
      hint += "; additive mask: add cfg.mask.score_bias(h, i, j, seq_q, seq_k) to $s_{hij}$ after scaling; "
              "a -inf bias gives key j weight 0";
      break;
  }
  return hint;
}

// For the worst query: the keys it may see under the case's mask.
std::string attention_hint_at(const AttentionCase& c, const std::vector<std::size_t>& at) {
  const std::size_t i = at[1];
  std::ostringstream out;
  out << "h " << at[0] << ", query i = " << i << ", output column d = " << at[2];
  if (c.mask == MaskKind::causal) {
    const std::size_t last = i + (c.seq_k - c.seq_q);
    out << ": it sees keys j = 0.." << last << " (i + seq_k - seq_q = " << i << " + " << c.seq_k << " - " << c.seq_q
        << ")";
  } else if (c.mask == MaskKind::boolean_with_empty_row && i == c.seq_q / 2) {
    out << ": the fully masked row, whose output must be 0";
  }
  return out.str();
}

TEST_P(AttentionCases, matches_oracle) {
  const auto& [impl, c] = GetParam();
  TVLAB_EXERCISE(impl, "00.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const unsigned long long seed = 7 + c.seq_q * 131 + c.head_dim;
  Rng rng(seed);
  Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim, 0.0, c.magnitude);
  Tensor3 k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim, 0.0, c.magnitude);
  const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim_v);
  k(0, c.seq_k - 1, 0) *= 8.0f;  // an outlier key: one sharply preferred position
  const AttentionConfig cfg = make_config(c, rng);

  const Tensor3 out = impl.sdpa(q, k, v, cfg);
  // Tolerance: the score s_ij is a length-d dot product with float error ~ eps sqrt(d) * M, where
  // M = scale * sum |q k| (score_magnitude); a score error delta moves the output by at most
  // ~2 delta max|v|. P V adds a length-seq_k reduction. Hence rtol = 10 eps sqrt(K) and
  // atol = rtol * max|v| * (2 M + 1), K = max(head_dim, seq_k).
  const double rtol = reduction_rtol(std::max(c.head_dim, c.seq_k));
  const tvlab::Tolerance tol{attention_tolerance(c.head_dim, c.seq_k, score_magnitude(q, k, cfg), xt::amax(xt::abs(v))()),
                             rtol};
  std::ostringstream explore;
  explore << "tvlab 00_attention_basics --seed " << seed << " --heads " << c.heads << " --seq " << c.seq_q
        << " --head-dim " << c.head_dim << (c.mask == MaskKind::causal ? " --causal" : "") << " --backend "
        << impl.name;
  EXPECT_TRUE(matches(out, sdpa_oracle(q, k, v, cfg), tol,
                      {std::string("scaled_dot_product_attention, ") + c.label + ", " + mask_name(c.mask),
                       {"h", "i", "d"}, seed, explore.str(), attention_hint(c),
                       [&c](const std::vector<std::size_t>& at) { return attention_hint_at(c, at); }}));
  if (c.mask == MaskKind::boolean_with_empty_row) {
    for (std::size_t h = 0; h < c.heads; ++h)
      for (std::size_t d = 0; d < c.head_dim_v; ++d)
        EXPECT_EQ(out(h, c.seq_q / 2, d), 0.0f) << "a fully masked query row must give output 0 (h=" << h << ", d=" << d << ")";
  }
}

void PrintTo(const AttentionCase& c, std::ostream* out) { *out << c.label << ", " << mask_name(c.mask); }

const AttentionCase kAttentionCases[] = {
    {"n = 1, d = 1", 1, 1, 1, 1, 1, MaskKind::none, 1.0},
    {"odd sizes", 2, 7, 7, 5, 5, MaskKind::none, 1.0},
    {"odd sizes", 2, 7, 7, 5, 5, MaskKind::causal, 1.0},
    {"seq_q != seq_k, d_v != d_k", 3, 33, 47, 16, 8, MaskKind::none, 1.0},
    {"decode style, seq_q < seq_k", 2, 5, 40, 16, 16, MaskKind::causal, 1.0},
    {"20 x 31, d 8", 2, 20, 31, 8, 8, MaskKind::boolean_with_empty_row, 1.0},
    {"19 x 23, d_v 12", 2, 19, 23, 8, 12, MaskKind::additive_with_neg_inf, 1.0},
    {"seq 129, head_dim 64", 4, 129, 129, 64, 64, MaskKind::causal, 1.0},
    {"large logits (q, k ~ N(0, 30^2))", 2, 24, 24, 16, 16, MaskKind::none, 30.0},
};

INSTANTIATE_TEST_SUITE_P(Ch00, AttentionCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::sdpa)),
                                            ::testing::ValuesIn(kAttentionCases)),
                         tvlab::testing::ImplCaseName());

// --------------------------------------------------------------- the mask specification, every part

// A case of AttentionMask: the structural parts, and which explicit ones (drawn from the seed).
struct MaskCase {
  const char* label;
  std::size_t heads, seq_q, seq_k, head_dim;
  bool causal;
  CausalAlign align;
  std::optional<SlidingWindow> window;
  bool boolean = false, bias = false, alibi = false;
};

AttentionMask make_mask(const MaskCase& c, Rng& rng) {
  AttentionMask mask;
  mask.causal = c.causal;
  mask.causal_align = c.align;
  mask.window = c.window;
  if (c.boolean) {
    Mask2 allowed = Mask2::from_shape({c.seq_q, c.seq_k});
    for (auto& a : allowed) a = rng.uniform() < 0.75;
    mask.allowed = allowed;
  }
  if (c.bias) {
    Tensor2 bias = rng.normal_matrix(c.seq_q, c.seq_k);
    for (std::size_t i = 0; i < c.seq_q; ++i) bias(i, (5 * i) % c.seq_k) = kNegInf;
    mask.bias = bias;
  }
  if (c.alibi) {
    DTensor1 slopes = DTensor1::from_shape({c.heads});
    for (std::size_t h = 0; h < c.heads; ++h) slopes(h) = std::pow(2.0, -static_cast<double>(h + 1));
    mask.alibi_slopes = slopes;
  }
  return mask;
}

void PrintTo(const MaskCase& c, std::ostream* out) { *out << c.label; }

// The rule of each part of the case's mask (every part applies: a key must pass them all).
std::string mask_hint(const MaskCase& c) {
  std::string hint = c.align == CausalAlign::top_left
                         ? "query i sits at position $i' = i$ (top_left)"
                         : "query i sits at position $i' = i + \\text{seq\\_k} - \\text{seq\\_q}$ (bottom_right)";
  if (c.causal) hint += "; causal: key j allowed when $j \\le i'$";
  if (c.window)
    hint += "; window {left " + std::to_string(c.window->left) + ", right " + std::to_string(c.window->right) +
            "}: key j allowed when $i' - \\text{left} \\le j \\le i' + \\text{right}$";
  if (c.boolean) hint += "; boolean mask: key j allowed where mask.allowed(i, j)";
  if (c.bias) hint += "; additive bias: $s_{hij}$ += bias(i, j), and -inf removes the key";
  if (c.alibi) hint += "; ALiBi: $s_{hij}$ += $-m_h\\,|i' - j|$ with slope $m_h = 2^{-(h+1)}$ here";
  return hint + "; a query that sees no key gives output 0";
}

// For the worst query: its position and the range of keys the causal rule and the window leave it.
std::string mask_hint_at(const MaskCase& c, const std::vector<std::size_t>& at) {
  const long long i = static_cast<long long>(at[1]);
  const long long shift = c.align == CausalAlign::top_left ? 0 : static_cast<long long>(c.seq_k) - static_cast<long long>(c.seq_q);
  const long long position = i + shift;
  long long first = 0, last = static_cast<long long>(c.seq_k) - 1;
  if (c.causal) last = std::min(last, position);
  if (c.window) {
    first = std::max(first, position - c.window->left);
    last = std::min(last, position + c.window->right);
  }
  std::ostringstream out;
  out << "h " << at[0] << ", query i = " << i << " at position i' = " << position;
  if (first > last)
    out << ": no key passes the causal rule and the window, so its output must be 0";
  else
    out << ": the causal rule and the window leave keys j = " << first << ".." << last
        << (c.boolean ? " (then the boolean mask)" : "");
  return out.str();
}

class MaskCases : public ::testing::TestWithParam<std::tuple<Backend, MaskCase>> {};

// Every backend either computes what the oracle computes from the mask's definition, or refuses
// the part it does not implement with a tvlab::Error naming it (its mask_support).
TEST_P(MaskCases, matches_the_oracle_or_refuses_the_part_naming_it) {
  const auto& [impl, c] = GetParam();
  TVLAB_EXERCISE(impl, "00.2");
  const unsigned long long seed = 500 + c.seq_q * 37 + c.seq_k;
  Rng rng(seed);
  const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
  const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
  AttentionConfig cfg;
  cfg.mask = make_mask(c, rng);
  const std::string missing = first_unsupported_part(cfg.mask, impl.caps.masks);
  if (!missing.empty()) {  // checked before any device work: runs without a GPU too
    EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, k, v, cfg); },
                                    {"scaled_dot_product_attention", "mask." + missing, "not supported"}));
    return;
  }
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const Tensor3 out = impl.sdpa(q, k, v, cfg);
  // As in AttentionCases: rtol = 10 eps sqrt(K), atol = rtol max|v| (2M + 1), M the size of a
  // score's terms (bias and ALiBi included).
  const double rtol = reduction_rtol(std::max(c.head_dim, c.seq_k));
  const double atol = attention_tolerance(c.head_dim, c.seq_k, score_magnitude(q, k, cfg), xt::amax(xt::abs(v))());
  EXPECT_TRUE(matches(out, sdpa_oracle(q, k, v, cfg), {atol, rtol},
                      {std::string("scaled_dot_product_attention, ") + c.label, {"h", "i", "d"}, seed, "",
                       mask_hint(c), [&c](const std::vector<std::size_t>& at) { return mask_hint_at(c, at); }}));
  // A row that sees no key gives exactly 0.
  for (std::size_t h = 0; h < c.heads; ++h) {
    const DTensor2 scores = masked_scores_oracle(q, k, cfg, h);
    for (std::size_t i = 0; i < c.seq_q; ++i) {
      if (xt::amax(xt::view(scores, i, xt::all()))() != -std::numeric_limits<double>::infinity()) continue;
      for (std::size_t d = 0; d < c.head_dim; ++d)
        EXPECT_EQ(out(h, i, d), 0.0f) << "row " << i << " sees no key: its output must be 0 (h=" << h << ", d=" << d << ")";
    }
  }
}

const MaskCase kMaskCases[] = {
    {"causal sliding window of 4 keys, 20 x 20", 2, 20, 20, 8, true, CausalAlign::bottom_right, SlidingWindow{3, 0}},
    {"two-sided window 2 + 3, 17 queries over 23 keys", 2, 17, 23, 8, false, CausalAlign::bottom_right,
     SlidingWindow{2, 3}},
    {"two-sided window top-left, 12 queries over 7 keys (the last rows see nothing)", 2, 12, 7, 8, false,
     CausalAlign::top_left, SlidingWindow{1, 1}},
    {"top-left causal, 9 queries over 14 keys", 2, 9, 14, 8, true, CausalAlign::top_left, std::nullopt},
    {"top-left causal, 14 queries over 9 keys", 2, 14, 9, 8, true, CausalAlign::top_left, std::nullopt},
    {"boolean mask, top-left causal window of 6 keys, 10 x 16", 2, 10, 16, 8, true, CausalAlign::top_left,
     SlidingWindow{5, 0}, true},
    {"ALiBi, 5 queries over 40 keys", 4, 5, 40, 8, false, CausalAlign::bottom_right, std::nullopt, false, false, true},
    // Not causal: under a causal rule ALiBi's bias moves by a constant per row when i' moves, which
    // the softmax cancels; keys on both sides of i' make the alignment visible.
    {"ALiBi top-left, two-sided window 3 + 5, 16 x 24", 3, 16, 24, 8, false, CausalAlign::top_left, SlidingWindow{3, 5},
     false, false, true},
    {"bias with -inf and a window 4 + 4, 19 x 23", 2, 19, 23, 8, false, CausalAlign::bottom_right, SlidingWindow{4, 4},
     false, true},
    {"window wider than the sequences", 1, 7, 7, 4, false, CausalAlign::bottom_right, SlidingWindow{1000, 1000}},
    {"seq 129, head_dim 64, causal window of 32 keys", 4, 129, 129, 64, true, CausalAlign::bottom_right,
     SlidingWindow{31, 0}},
};

INSTANTIATE_TEST_SUITE_P(Ch00, MaskCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::sdpa)),
                                            ::testing::ValuesIn(kMaskCases)),
                         tvlab::testing::ImplCaseName());

TEST_P(Attention, a_window_as_wide_as_the_keys_changes_nothing_and_a_zero_window_copies_the_diagonal) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "00.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  if (!impl.caps.masks.window) GTEST_SKIP() << impl.name << " implements no sliding window (MaskCases tests its error)";
  Rng rng(14);
  const Tensor3 q = rng.normal_tensor(2, 6, 4), k = rng.normal_tensor(2, 6, 4), v = rng.normal_tensor(2, 6, 3);
  AttentionConfig wide;
  wide.mask.window = SlidingWindow{5, 5};  // every key of 6 is within 5 of every query
  EXPECT_TRUE(matches(impl.sdpa(q, k, v, wide), xt::eval(xt::cast<double>(impl.sdpa(q, k, v, {}))), {0.0, 0.0},
                      {"window {5, 5} over 6 keys vs no mask", {"h", "i", "d"}, 14, "", "a window limits nothing it covers"}));
  // Window {0, 0}: query i sees key i only, with weight exp(0)/exp(0) = 1: the output is v[h, i, :].
  AttentionConfig diagonal;
  diagonal.mask.window = SlidingWindow{0, 0};
  const Tensor3 out = impl.sdpa(q, k, v, diagonal);
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < 6; ++i)
      for (std::size_t d = 0; d < 3; ++d) EXPECT_NEAR(out(h, i, d), v(h, i, d), 1e-6)
            << "window {0, 0}: query i sees key i alone (weight 1), so out(h, i, :) = v(h, i, :); h=" << h << ", i=" << i
            << ", d=" << d;
}

TEST_P(Attention, first_causal_row_copies_the_first_value) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "00.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(11);
  const Tensor3 q = rng.normal_tensor(2, 6, 4), k = rng.normal_tensor(2, 6, 4), v = rng.normal_tensor(2, 6, 3);
  AttentionConfig cfg;
  cfg.mask.causal = true;
  const Tensor3 out = impl.sdpa(q, k, v, cfg);
  // Query 0 sees only key 0: its weight is exp(0)/exp(0) = 1, so the output is v[h, 0, :].
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t d = 0; d < 3; ++d)
      EXPECT_NEAR(out(h, 0, d), v(h, 0, d), 1e-6) << "causal query 0 must copy value 0 (h=" << h << ", d=" << d << ")";
}

TEST_P(Attention, permuting_keys_and_values_together_changes_nothing) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "00.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(12);
  const Tensor3 q = rng.normal_tensor(2, 9, 8), k = rng.normal_tensor(2, 11, 8), v = rng.normal_tensor(2, 11, 8);
  Tensor3 k2 = k, v2 = v;
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t j = 0; j < 11; ++j) {  // reverse the key order
      xt::view(k2, h, j, xt::all()) = xt::view(k, h, 10 - j, xt::all());
      xt::view(v2, h, j, xt::all()) = xt::view(v, h, 10 - j, xt::all());
    }
  const Tensor3 a = impl.sdpa(q, k, v, {}), b = impl.sdpa(q, k2, v2, {});
  EXPECT_TRUE(matches(b, xt::eval(xt::cast<double>(a)), {1e-6, reduction_rtol(11)},
                      {"attention with reversed keys vs original", {"h", "i", "d"}, 12, "",
                       "attention is a set operation over keys: no position enters without a mask or encoding"}));
}

TEST_P(Attention, zero_queries_average_the_values) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "00.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(13);
  const Tensor3 q = xt::zeros<float>({1, 3, 4}), k = rng.normal_tensor(1, 5, 4), v = rng.normal_tensor(1, 5, 2);
  const Tensor3 out = impl.sdpa(q, k, v, {});
  // All scores are 0, so every weight is 1/5 and each output is the mean of the values.
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t d = 0; d < 2; ++d) {
      double mean = 0.0;
      for (std::size_t j = 0; j < 5; ++j) mean += v(0, j, d) / 5.0;
      EXPECT_NEAR(out(0, i, d), mean, 1e-6) << "q = 0: every score is 0, every weight 1/5, so out(0, " << i << ", " << d
                                            << ") is the mean of v(0, :, " << d << ")";
    }
}

TEST_P(Attention, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "00.2");
  const Tensor3 q = xt::ones<float>({2, 4, 8}), k = xt::ones<float>({2, 5, 8}), v = xt::ones<float>({2, 5, 6});
  const char* fn = "scaled_dot_product_attention";
  // Every case below: start with validate_attention(...), whose messages these are.
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, Tensor3(xt::ones<float>({3, 5, 8})), v, {}); }, {fn, "k", "heads"}))
      << "q [2, 4, 8], k [3, 5, 8]: different head counts";
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, Tensor3(xt::ones<float>({2, 5, 7})), v, {}); }, {fn, "k", "head_dim"}))
      << "q [2, 4, 8], k [2, 5, 7]: different head_dim";
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, k, Tensor3(xt::ones<float>({2, 4, 6})), {}); }, {fn, "v", "seq"}))
      << "k [2, 5, 8], v [2, 4, 6]: v must have seq_k = 5 rows";
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(Tensor3(xt::ones<float>({2, 0, 8})), k, v, {}); }, {fn, "q", "empty"}))
      << "q [2, 0, 8]: empty";
  Tensor3 bad_k = k;
  bad_k(1, 2, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, bad_k, v, {}); }, {fn, "k", "non-finite"})) << "k with NaN at (1, 2, 3)";
  AttentionConfig cfg;
  cfg.mask.allowed = Mask2(xt::ones<bool>({4, 4}));
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, k, v, cfg); }, {fn, "mask.allowed", "[4, 5]"}))
      << "mask.allowed [4, 4] for seq_q 4, seq_k 5";
  cfg = {};
  cfg.mask.bias = Tensor2(xt::zeros<float>({4, 5}));
  (*cfg.mask.bias)(0, 0) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, k, v, cfg); }, {fn, "mask.bias"})) << "mask.bias with +inf at (0, 0)";
  cfg = {};
  cfg.scale = 0.0;
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, k, v, cfg); }, {fn, "scale"})) << "cfg.scale = 0";
  cfg.scale = 1e39;  // beyond float
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, k, v, cfg); }, {fn, "scale"})) << "cfg.scale = 1e39";
  cfg = {};
  cfg.mask.causal = true;
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(k, q, q, cfg); }, {fn, "causal", "seq_q"}))
      << "causal with seq_q 5 > seq_k 4 (bottom_right): the first queries would see no key";
  cfg = {};
  cfg.mask.window = SlidingWindow{-1, 0};
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, k, v, cfg); }, {fn, "mask.window.left", ">= 0"})) << "window {left -1, right 0}";
  // Finite, but q . k would overflow float: every backend computes scores in float.
  const Tensor3 huge = q * 1e19f;
  const Tensor3 v4 = xt::ones<float>({2, 4, 6});
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(huge, huge, v4, {}); }, {fn, "q and k", "too large"}))
      << "q = k = 1e19: q . k = 8e38 overflows float";
  // A tiny scale does not help: q . k is formed in float before it is scaled.
  cfg = {};
  cfg.scale = 1e-20;
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(huge, huge, v4, cfg); }, {fn, "q and k", "too large"}))
      << "q = k = 1e19 with cfg.scale = 1e-20";
  // Finite scores plus a finite but huge bias overflow too.
  cfg = {};
  cfg.mask.bias = Tensor2(xt::zeros<float>({4, 5}));
  (*cfg.mask.bias)(2, 1) = std::numeric_limits<float>::max();
  EXPECT_TRUE(throws_error_naming([&] { impl.sdpa(q, k, v, cfg); }, {fn, "scores could reach", "mask.bias"}))
      << "mask.bias(2, 1) = FLT_MAX";
}

INSTANTIATE_TEST_SUITE_P(Ch00, Attention, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::sdpa)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------- multi-head attention

TEST_P(MultiHead, matches_oracle) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  for (const int heads : {1, 3, 4}) {
    const std::size_t head_dim = 4, d_model = 12, seq_q = 9, seq_k = 13;
    const unsigned long long seed = 40 + static_cast<unsigned>(heads);
    Rng rng(seed);
    const double w_std = 1.0 / std::sqrt(static_cast<double>(d_model));
    const std::size_t inner = static_cast<std::size_t>(heads) * head_dim;
    MhaWeights w{rng.normal_matrix(d_model, inner, 0, w_std), rng.normal_matrix(d_model, inner, 0, w_std),
                 rng.normal_matrix(d_model, inner, 0, w_std), rng.normal_matrix(inner, d_model, 0, w_std)};
    const Tensor2 xq = rng.normal_matrix(seq_q, d_model), xkv = rng.normal_matrix(seq_k, d_model);
    AttentionConfig cfg;
    cfg.mask.causal = heads == 3;
    const Tensor2 y = impl.mha(xq, xkv, w, heads, cfg);
    // Four chained reductions of length <= 13 on O(1) values.
    const double rtol = 4 * reduction_rtol(seq_k);
    EXPECT_TRUE(matches(y, mha_oracle(xq, xkv, w, heads, cfg), {rtol, rtol},
                        {"multi_head_attention, heads " + std::to_string(heads), {"i", "c"}, seed, "",
                         "head h uses columns [h*head_dim, (h+1)*head_dim) of W_q, W_k, W_v and rows of W_o"}));
  }
}

TEST_P(MultiHead, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  const Tensor2 x = xt::ones<float>({3, 8});
  MhaWeights w{xt::ones<float>({8, 8}), xt::ones<float>({8, 8}), xt::ones<float>({8, 8}), xt::ones<float>({8, 8})};
  const char* fn = "multi_head_attention";
  EXPECT_TRUE(throws_error_naming([&] { impl.mha(x, x, w, 0, {}); }, {fn, "num_heads"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.mha(x, x, w, 3, {}); }, {fn, "num_heads", "multiple"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.mha(x, Tensor2(xt::ones<float>({3, 7})), w, 2, {}); }, {fn, "x_kv", "d_model"}));
  MhaWeights bad = w;
  bad.w_o = xt::ones<float>({8, 5});
  EXPECT_TRUE(throws_error_naming([&] { impl.mha(x, x, bad, 2, {}); }, {fn, "w_o"}));
  bad = w;
  bad.w_v(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.mha(x, x, bad, 2, {}); }, {fn, "w_v"}));
  // The config is checked before any projection, under this function's name.
  AttentionConfig cfg;
  cfg.mask.allowed = Mask2(xt::ones<bool>({3, 2}));
  EXPECT_TRUE(throws_error_naming([&] { impl.mha(x, x, w, 2, cfg); }, {fn, "mask.allowed", "[3, 3]"}));
  cfg = {};
  cfg.mask.causal = true;
  EXPECT_TRUE(throws_error_naming([&] { impl.mha(Tensor2(xt::ones<float>({4, 8})), x, w, 2, cfg); }, {fn, "causal"}));
}

INSTANTIATE_TEST_SUITE_P(Ch00, MultiHead, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::mha)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MultiHead);

}  // namespace
}  // namespace tvlab::ch00

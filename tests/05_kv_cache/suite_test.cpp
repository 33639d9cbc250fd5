// Chapter 05's suites, run over every backend of its registry: the decode step of grouped-query
// attention over a KV cache equals a double-precision oracle for MHA, GQA and MQA shapes, reads
// only the cached positions (the free slots after them hold NaN), and names the bad parameter.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::kv {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

struct DecodeCase {
  const char* label;
  std::size_t heads, kv_heads, head_dim, head_dim_v, capacity, length;
};
void PrintTo(const DecodeCase& c, std::ostream* out) { *out << c.label; }

// The oracle, from the definition, in double: query head t reads kv head t / (h/g);
// s_tp = scale q_t . k_p over p < length, o_t = sum_p softmax_p(s_t) v_p, lse_t = log sum_p e^{s_tp}.
struct Oracle {
  DTensor2 out;
  DTensor1 lse;
};
Oracle decode_oracle(const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t length, double scale) {
  const std::size_t h = q.shape()[0], d = q.shape()[1], g = k.shape()[0], d_v = v.shape()[2];
  Oracle o{xt::zeros<double>({h, d_v}), xt::zeros<double>({h})};
  for (std::size_t t = 0; t < h; ++t) {
    const std::size_t j = t / (h / g);
    std::vector<double> s(length);
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t p = 0; p < length; ++p) {
      double dot = 0.0;
      for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(q(t, e)) * k(j, p, e);
      s[p] = scale * dot;
      m = std::max(m, s[p]);
    }
    double sum = 0.0;
    for (std::size_t p = 0; p < length; ++p) sum += std::exp(s[p] - m);
    for (std::size_t p = 0; p < length; ++p)
      for (std::size_t e = 0; e < d_v; ++e) o.out(t, e) += std::exp(s[p] - m) / sum * v(j, p, e);
    o.lse(t) = m + std::log(sum);
  }
  return o;
}

// Caches whose free slots (positions length .. capacity - 1) hold NaN, as ref::KvCache's do: a
// decode that reads past the length returns NaN.
struct Inputs {
  Tensor2 q;
  Tensor3 k, v;
};
Inputs make_inputs(const DecodeCase& c, std::uint64_t seed) {
  Rng rng(seed);
  Inputs in{rng.normal_matrix(c.heads, c.head_dim), rng.normal_tensor(c.kv_heads, c.capacity, c.head_dim),
            rng.normal_tensor(c.kv_heads, c.capacity, c.head_dim_v)};
  in.k(0, c.length - 1, 0) *= 6.0f;  // an outlier key, so that the softmax is not flat
  const float nan = std::numeric_limits<float>::quiet_NaN();
  xt::view(in.k, xt::all(), xt::range(c.length, c.capacity), xt::all()) = nan;
  xt::view(in.v, xt::all(), xt::range(c.length, c.capacity), xt::all()) = nan;
  return in;
}

class DecodeCases : public ::testing::TestWithParam<std::tuple<Backend, DecodeCase>> {};

TEST_P(DecodeCases, matches_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 500 + c.heads * 31 + c.kv_heads * 7 + c.length;
  const Inputs in = make_inputs(c, seed);
  for (const std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.3}}) {
    const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    const Oracle oracle = decode_oracle(in.q, in.k, in.v, c.length, s);
    const DecodeAttention got = backend.decode(in.q, in.k, in.v, c.length, scale);
    // Scores are dot products of length d (values of order 6 at most), the output a weighted
    // average of `length` values of order 1: a few float roundings of each.
    const Tolerance tol{1e-5, reduction_rtol(std::max(c.head_dim, c.length))};
    const std::string what = std::string("gqa_decode_attention, ") + c.label + ", scale " +
                             (scale ? std::to_string(*scale) : std::string("1/sqrt(d)"));
    EXPECT_TRUE(matches(got.out, oracle.out, tol,
                        {what + ": out",
                         {"t", "e"},
                         seed,
                         std::string("tvlab kv --step --backend ") + backend.name,
                         "query head t reads kv head t / (h/g) (consecutive heads share one), over positions "
                         "0 .. length - 1 only: the slots after them are free"}));
    EXPECT_TRUE(
        matches(got.lse, oracle.lse, {1e-5, 1e-6},
                {what + ": lse", {"t"}, seed, "", "lse_t = m_t + log sum_p exp(s_tp - m_t), m_t = max_p s_tp"}));
  }
}

const DecodeCase kCases[] = {
    {"MHA h 4, d 8, 6 of 9 slots", 4, 4, 8, 8, 9, 6},
    {"GQA h 8 g 2, d 16, 13 of 16 slots", 8, 2, 16, 16, 16, 13},
    {"GQA h 6 g 3, d 5, d_v 7, 11 of 11 slots", 6, 3, 5, 7, 11, 11},
    {"MQA h 8, d 4, 1 of 4 slots", 8, 1, 4, 4, 4, 1},
    {"MQA h 4, d 32, 200 of 257 slots", 4, 1, 32, 32, 257, 200},
};
INSTANTIATE_TEST_SUITE_P(Ch05, DecodeCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::decode)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DecodeCases);  // not an exercise

class DecodeErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(DecodeErrors, bad_input_names_the_parameter) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 8, 8, 6, 4}, 3);
  auto decode = [&](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t length,
                    std::optional<double> scale = std::nullopt) {
    return [&backend, q, k, v, length, scale] { backend.decode(q, k, v, length, scale); };
  };
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, in.v, 0), {"length"})) << "length 0";
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, in.v, 7), {"length", "capacity"})) << "length 7 > capacity 6";
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, in.v, 4, -1.0), {"scale"})) << "scale -1";
  const Inputs three_heads = make_inputs({"h 3 g 2", 3, 2, 8, 8, 6, 4}, 4);
  EXPECT_TRUE(throws_error_naming(decode(three_heads.q, in.k, in.v, 4), {"num_heads"})) << "h = 3, g = 2";
  const Tensor3 narrow_k = xt::view(in.k, xt::all(), xt::all(), xt::range(0, 7));
  EXPECT_TRUE(throws_error_naming(decode(in.q, narrow_k, in.v, 4), {"k_cache"})) << "k_cache of head_dim 7, q of 8";
  const Tensor3 short_v = xt::view(in.v, xt::all(), xt::range(0, 5), xt::all());
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, short_v, 4), {"v_cache"})) << "v_cache capacity 5, k_cache 6";
  Tensor2 q_nan = in.q;
  q_nan(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(decode(q_nan, in.k, in.v, 4), {"q"})) << "q with NaN";
  Tensor3 k_inf = in.k;
  k_inf(1, 3, 0) = std::numeric_limits<float>::infinity();  // a cached position: an error
  EXPECT_TRUE(throws_error_naming(decode(in.q, k_inf, in.v, 4), {"k_cache"})) << "k_cache with inf at position 3";
}

TEST_P(DecodeErrors, a_full_cache_and_one_position_are_valid) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 8, 8, 6, 6}, 5);
  const DecodeAttention full = backend.decode(in.q, in.k, in.v, 6, std::nullopt);
  EXPECT_EQ(full.out.shape()[0], 4u);
  EXPECT_EQ(full.lse.shape()[0], 4u);
  // One cached position: each head's output is that position's value, its lse its one score.
  const DecodeAttention one = backend.decode(in.q, in.k, in.v, 1, std::nullopt);
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t e = 0; e < 8; ++e) EXPECT_NEAR(one.out(t, e), in.v(t / 2, 0, e), 1e-6) << "head " << t;
}

INSTANTIATE_TEST_SUITE_P(Ch05, DecodeErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::decode)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DecodeErrors);  // not an exercise

}  // namespace
}  // namespace tvlab::kv

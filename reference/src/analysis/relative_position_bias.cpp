#include "tvlab/analysis/relative_position_bias.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/attention.hpp"

namespace tvlab::analysis {
namespace {

void check_buckets(const char* fn, bool bidirectional, int num_buckets, int max_distance) {
  require(num_buckets >= (bidirectional ? 4 : 2), fn, "num_buckets (", num_buckets, ") must be at least ",
          bidirectional ? "4 when bidirectional (two halves, each with an exact bucket)" : "2 (one exact bucket)");
  const int exact = (bidirectional ? num_buckets / 2 : num_buckets) / 2;
  require(max_distance > exact, fn, "max_distance (", max_distance, ") must exceed the ", exact,
          " exact buckets (the logarithmic buckets cover [", exact, ", max_distance))");
}

// The bucket of n = |r| (or max(-r, 0)) among B buckets, E = B/2 of them exact.
long long bucket_of_distance(long long n, int buckets, int max_distance) {
  const int exact = buckets / 2;
  if (n < exact) return n;
  // E + floor(ln(n / E) / ln(max_distance / E) (B - E)). At the edges n = E (max_distance/E)^(t/(B-E)),
  // whole numbers for T5's defaults (16, 32, 64 with B = 16, E = 8, max_distance 128), the quotient
  // is an integer, which the logarithms in double give exactly there (the tests check those edges).
  const double log_ratio = std::log(static_cast<double>(n) / exact) / std::log(static_cast<double>(max_distance) / exact);
  const auto offset = static_cast<long long>(std::floor(log_ratio * (buckets - exact)));
  return std::min<long long>(exact + offset, buckets - 1);
}

}  // namespace

long long t5_relative_position_bucket(long long r, bool bidirectional, int num_buckets, int max_distance) {
  check_buckets("t5_relative_position_bucket", bidirectional, num_buckets, max_distance);
  if (bidirectional) {
    // Two halves of B = num_buckets / 2: keys before (or at) the query, keys after it.
    const int half = num_buckets / 2;
    const long long offset = r > 0 ? half : 0;
    return offset + bucket_of_distance(r < 0 ? -r : r, half, max_distance);
  }
  // Decoder: only keys at or before the query matter; n = max(-r, 0).
  return bucket_of_distance(std::max(-r, 0LL), num_buckets, max_distance);
}

Tensor3 t5_relative_position_bias(const Tensor2& table, long long seq_q, long long seq_k, bool bidirectional,
                                  int max_distance) {
  const char* fn = "t5_relative_position_bias";
  require_positive(fn, "seq_q", seq_q);
  require_positive(fn, "seq_k", seq_k);
  require(table.shape()[0] >= 1 && table.shape()[1] >= 1, fn, "table must be [num_buckets, heads] with both >= 1 (got [",
          table.shape()[0], ", ", table.shape()[1], "])");
  const auto num_buckets = static_cast<int>(table.shape()[0]);
  check_buckets(fn, bidirectional, num_buckets, max_distance);
  for (float x : table) require(std::isfinite(x), fn, "table holds a non-finite value (", x, ")");
  const std::size_t heads = table.shape()[1], nq = static_cast<std::size_t>(seq_q), nk = static_cast<std::size_t>(seq_k);
  Tensor3 bias = Tensor3::from_shape({heads, nq, nk});
  for (std::size_t i = 0; i < nq; ++i) {
    // i' = i + seq_k - seq_q: the query's position among the keys.
    const long long query_position = static_cast<long long>(i) + seq_k - seq_q;
    for (std::size_t j = 0; j < nk; ++j) {
      // b_hij = T[bucket(j - i'), h]
      const long long bucket =
          t5_relative_position_bucket(static_cast<long long>(j) - query_position, bidirectional, num_buckets, max_distance);
      for (std::size_t h = 0; h < heads; ++h) bias(h, i, j) = table(static_cast<std::size_t>(bucket), h);
    }
  }
  return bias;
}

Tensor3 attention_with_head_bias(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& bias,
                                 const AttentionConfig& cfg) {
  const char* fn = "attention_with_head_bias";
  validate_attention(fn, q, k, v, cfg);  // q, k, v and the rest of the mask, before the bias
  const std::size_t heads = q.shape()[0], nq = q.shape()[1], nk = k.shape()[1];
  require(bias.shape()[0] == heads && bias.shape()[1] == nq && bias.shape()[2] == nk, fn, "bias must be [heads, seq_q, seq_k] = [",
          heads, ", ", nq, ", ", nk, "] (got [", bias.shape()[0], ", ", bias.shape()[1], ", ", bias.shape()[2], "])");
  for (float x : bias)
    require(!std::isnan(x) && x != std::numeric_limits<float>::infinity(), fn,
            "bias holds NaN or +inf (", x, "): only finite values and -inf define a softmax");
  Tensor3 out = Tensor3::from_shape({heads, nq, v.shape()[2]});
  for (std::size_t h = 0; h < heads; ++h) {
    // One head: its slice of q, k, v and its [seq_q, seq_k] bias as the mask's (shared-by-all-heads) bias.
    const Tensor3 qh = xt::view(q, xt::range(h, h + 1), xt::all(), xt::all());
    const Tensor3 kh = xt::view(k, xt::range(h, h + 1), xt::all(), xt::all());
    const Tensor3 vh = xt::view(v, xt::range(h, h + 1), xt::all(), xt::all());
    AttentionConfig head_cfg = cfg;
    Tensor2 head_bias = xt::view(bias, h, xt::all(), xt::all());
    if (cfg.mask.bias) head_bias = head_bias + *cfg.mask.bias;
    head_cfg.mask.bias = head_bias;
    // ALiBi's slopes are per head: keep head h's only.
    if (cfg.mask.alibi_slopes) {
      require(cfg.mask.alibi_slopes->size() == heads, fn, "cfg.mask.alibi_slopes must hold one slope per head (", heads,
              "), got ", cfg.mask.alibi_slopes->size());
      head_cfg.mask.alibi_slopes = DTensor1({(*cfg.mask.alibi_slopes)(h)});
    }
    const Tensor3 oh = ref::scaled_dot_product_attention(qh, kh, vh, head_cfg);
    xt::view(out, h, xt::all(), xt::all()) = xt::view(oh, 0, xt::all(), xt::all());
  }
  return out;
}

}  // namespace tvlab::analysis

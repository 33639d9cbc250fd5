#include "bench_attention.hpp"

#include <algorithm>
#include <cmath>

#include "bench_support.hpp"
#include "tvlab/core/xt.hpp"

namespace tvlab::bench {

std::size_t validated_rows(std::size_t seq) { return seq <= 512 ? seq : 32; }

Tensor3 rows_of(const Tensor3& x, std::size_t first, std::size_t count) {
  return xt::view(x, xt::all(), xt::range(first, first + count), xt::all());
}

Tensor2 rows_of(const Tensor2& x, std::size_t first, std::size_t count) {
  return xt::view(x, xt::all(), xt::range(first, first + count));
}

namespace {
// max over the rows of x [heads, seq, dim] of the Euclidean norm of a row.
double max_row_norm(const Tensor3& x) {
  return std::sqrt(static_cast<double>(xt::amax(xt::sum(x * x, {2}))()));
}
}  // namespace

Tolerance attention_output_tolerance(const Tensor3& q, const Tensor3& k, const Tensor3& v, double scale,
                                     double max_abs_bias) {
  const std::size_t head_dim = q.shape()[2], seq_k = k.shape()[1];
  const double magnitude = scale * max_row_norm(q) * max_row_norm(k) + max_abs_bias;
  const double max_abs_v = xt::amax(xt::abs(v))();
  return {attention_tolerance(head_dim, seq_k, magnitude, max_abs_v), reduction_rtol(std::max(head_dim, seq_k))};
}

bool validate_attention(benchmark::State& state, const Tensor3& out, const Tensor3& q,
                        const std::function<Tensor3(const Tensor3& q_rows)>& reference, Tolerance tol) {
  const std::size_t seq_q = q.shape()[1], rows = validated_rows(seq_q), first = seq_q - rows;
  return validate(state, rows_of(out, first, rows), reference(rows_of(q, first, rows)), tol);
}

}  // namespace tvlab::bench

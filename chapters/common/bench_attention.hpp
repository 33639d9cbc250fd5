#pragma once
/// @file
/// Checking an attention output against the reference before timing it, at any length. The
/// reference (double accumulators, plain loops) takes seconds to minutes at the lengths the
/// optimized versions are timed at, so beyond 512 queries it recomputes only the last query rows
/// and the benchmark compares those. Each output row depends on its own query and every key, and
/// the mask's positions are aligned bottom-right (the default `CausalAlign`): the last r rows of q
/// alone, with every key, are the same r queries, under the causal rule, a window, ALiBi and RoPE
/// alike. The last rows are also the longest under a causal mask.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <functional>

#include "tvlab/core/compare.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::bench {

/// How many query rows (the last ones) the reference recomputes for a check: all of them up to
/// 512, else 32 (the reference then costs well under a second at the longest lengths timed).
std::size_t validated_rows(std::size_t seq);

/// Rows [first, first + count) of the middle axis of x `[heads, seq, dim]` (a copy).
Tensor3 rows_of(const Tensor3& x, std::size_t first, std::size_t count);
/// Columns [first, first + count) of x `[heads, seq]` (a copy).
Tensor2 rows_of(const Tensor2& x, std::size_t first, std::size_t count);

/// The tolerance of attention computed in float, as the tests take it: rtol = reduction_rtol(K),
/// atol = attention_tolerance(head_dim, seq_k, M, max|v|) = rtol max|v| (2M + 1), K = max(head_dim,
/// seq_k). M bounds the magnitude of a score's terms, scale sum_d |q_id k_jd| + |bias|; here by
/// Cauchy-Schwarz, scale max_i |q_i| max_j |k_j| + `max_abs_bias` (O(n d) to compute, at most a few
/// times the exact maximum).
Tolerance attention_output_tolerance(const Tensor3& q, const Tensor3& k, const Tensor3& v, double scale,
                                     double max_abs_bias = 0.0);

/// Checks `out` `[heads, seq_q, d_v]` on its last `validated_rows(seq_q)` rows against
/// `reference(q_rows)`, the reference's output for those rows of q alone (every key).
bool validate_attention(benchmark::State& state, const Tensor3& out, const Tensor3& q,
                        const std::function<Tensor3(const Tensor3& q_rows)>& reference, Tolerance tol);

}  // namespace tvlab::bench

#pragma once
/// @file
/// Exercise 06.2: one token of the gated delta rule on one head's state, the step every member of
/// the delta-rule family takes (`tvlab/ref/delta_rule.hpp` runs it over whole sequences).

#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch06
/// One token t, in place on the state \f$ S \f$ `[d_k, d_v]` of one head, in the order the papers
/// define it: decay \f$ \tilde S = \mathrm{diag}(e^{g})\, S \f$; predict with the decayed state and
/// correct, \f$ u = \beta\,(v - \tilde S^\top k) \f$; write \f$ S \leftarrow \tilde S + k u^\top \f$;
/// read \f$ o = S^\top (\text{scale}\; q) \f$. A zero `log_gate` is DeltaNet, the same number in every
/// channel Gated DeltaNet, one per channel KDA.
/// @param state \f$ S \f$ `[d_k, d_v]`, updated; unchanged when the call throws
/// @param q, k `[d_k]`; v `[d_v]`
/// @param beta the writing strength, in [0, 1]
/// @param log_gate \f$ g = \log \alpha \f$ `[d_k]`, every entry <= 0
/// @param scale multiplies q at the readout, > 0
/// @return \f$ o \f$ `[d_v]`
Tensor1 gated_delta_rule_step(Tensor2& state, const Tensor1& q, const Tensor1& k, const Tensor1& v, double beta,
                              const Tensor1& log_gate, double scale);

/// @ingroup ch06
/// Exercise 06.3: the triangular solve inside a chunk of the chunked delta rule (the UT transform,
/// `ref::delta_rule_chunked`). For a chunk of C positions, with A `[C, C]` the (decayed) key products
/// \f$ A_{ij} = k_i^\top k_j \f$ (only \f$ j < i \f$ is used), the writing strengths \f$ \beta \f$ `[C]` and
/// the right-hand side W `[C, d_v]` (\f$ V - (K \odot e^G) S_0 \f$ in the chunked algorithm), returns U
/// `[C, d_v]` with
/// \f[ \big(I + \mathrm{StrictLower}(\mathrm{diag}(\beta)\, A)\big)\, U = \mathrm{diag}(\beta)\, W, \qquad
///     u_i = \beta_i \Big(w_i - \sum_{j < i} A_{ij}\, u_j\Big), \f]
/// by forward substitution (row i needs only the rows before it).
Tensor2 ut_transform_solve(const Tensor2& a, const Tensor1& beta, const Tensor2& w);

}  // namespace tvlab::student

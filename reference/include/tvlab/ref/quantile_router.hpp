#pragma once
/// @file
/// Chapter 09, quantile balancing (004 L179: Kimi K3 "assigns experts directly by quantiles of the
/// router scores, each expert steadily receiving a fixed share of the tokens"). Kimi K3's method is
/// not published in a form we could check; this is the described idea, with our definition:
///
/// With router scores \f$ s = \mathrm{softmax}(z) \f$ `[N, E]` over a calibration batch of N tokens and a
/// target of k experts per token on average, each expert's share is
/// \f$ m = \lceil N / E \cdot k \rceil \f$ tokens (`expert_capacity(N, E, k)`), a fraction \f$ q = m / N \f$ of the batch.
/// Expert e's **threshold** is the score it would need to be among its m best tokens,
/// \f[ \tau_e = s_{(m),e}, \f]
/// the m-th largest of \f$ s_{1e}, \dots, s_{Ne} \f$: the \f$ 1 - q \f$ quantile of expert e's column. A token t then
/// goes to every expert with \f$ s_{te} \ge \tau_e \f$, gate \f$ s_{te} \f$.
///
/// On the batch the thresholds came from, each expert gets exactly its m tokens (more only where
/// scores tie at \f$ \tau_e \f$): the same assignments as expert choice with capacity factor k. The
/// difference is what is kept: E numbers, after which each token decides alone, with no sort over
/// a batch (usable in decoding), and on later batches from the same distribution each expert gets
/// about its share. As in expert choice, a token may get more or fewer than k experts.

#include <cstddef>
#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch09
/// The thresholds \f$ \tau \f$ `[E]` of a calibration batch's logits `[N, E]` for an average of `top_k`
/// experts per token. Errors: empty or non-finite logits, top_k not in 1..E-1.
std::vector<double> quantile_thresholds(const Tensor2& logits, std::size_t top_k);

/// @ingroup ch09
/// Routes logits `[tokens, E]`: token t to each expert with \f$ s_{te} \ge \tau_e \f$, listed by token and
/// expert, gate \f$ s_{te} \f$. Errors: empty or non-finite logits, thresholds not of length E or not
/// finite.
Routing route_quantile(const Tensor2& logits, const std::vector<double>& thresholds);

}  // namespace tvlab::ref

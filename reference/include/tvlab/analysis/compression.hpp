#pragma once
/// @file
/// Chapter 08, compression beyond quantization, as calculators and experiments:
///
/// - **Low-rank factorisation** (000 L279–L281): \f$ W \in \mathbb{R}^{m \times n} \f$ replaced by
///   \f$ W_r = L R \f$ with \f$ L \in \mathbb{R}^{m \times r} \f$, \f$ R \in \mathbb{R}^{r \times n} \f$: the
///   parameters fall from \f$ mn \f$ to \f$ r(m + n) \f$, a compression of \f$ mn / (r(m+n)) \f$. The best
///   such factorisation in the Frobenius norm is the truncated SVD (Eckart–Young):
///   \f$ L = U_r \mathrm{diag}(\sigma_1 \ldots \sigma_r) \f$, \f$ R = V_r^\top \f$, with the error
///   \f$ \lVert W - W_r \rVert_F^2 = \sum_{i > r} \sigma_i^2 \f$. How much a rank keeps is therefore
///   decided by the spectrum: a random matrix spreads its energy over all singular values, a
///   matrix that is low rank plus noise concentrates it in the first few.
/// - **Cross-layer parameter sharing** (ALBERT, Lan et al. 2020; 000 L275): the L layers of an
///   encoder use one set of weights, so the layers' parameters are divided by L; ALBERT also
///   factorises the embedding \f$ V \times H \f$ into \f$ V \times E \f$ and \f$ E \times H \f$.

#include <cstddef>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// @ingroup ch08
/// The rank-r factors of W `[m, n]`: left `[m, r]` = \f$ U_r \mathrm{diag}(\sigma_{1..r}) \f$, right `[r, n]` =
/// \f$ V_r^\top \f$, and every singular value of W (decreasing).
struct LowRankFactors {
  DTensor2 left, right;
  std::vector<double> singular_values;
};

/// @ingroup ch08
/// The truncated SVD of w, any shape (a wide matrix is decomposed through its transpose). Errors:
/// an empty w, a rank of 0 or above min(m, n).
LowRankFactors low_rank_factors(const DTensor2& w, std::size_t rank);

/// @ingroup ch08
/// One row of the error-against-rank table.
struct LowRankRow {
  std::size_t rank = 0;
  double compression = 0.0;     ///< \f$ mn / (r(m + n)) \f$
  double relative_error = 0.0;  ///< \f$ \lVert W - LR \rVert_F / \lVert W \rVert_F \f$, from the product
};

/// @ingroup ch08
/// For each rank: the compression and the relative Frobenius error of the rank-r factorisation,
/// the error measured on the product \f$ L R \f$ (the tests hold it to \f$ \sqrt{\sum_{i>r}\sigma_i^2} \f$).
std::vector<LowRankRow> low_rank_table(const DTensor2& w, const std::vector<std::size_t>& ranks);

/// @ingroup ch08
/// A BERT-style encoder's shape (Hugging Face's names): vocab_size, hidden_size H, num_hidden_layers
/// L, intermediate_size F, max_position_embeddings, type_vocab_size, and embedding_size E (0: no
/// factorisation, the embedding is \f$ V \times H \f$).
struct EncoderShape {
  long long vocab_size = 30522, hidden_size = 768, num_hidden_layers = 12, intermediate_size = 3072;
  long long max_position_embeddings = 512, type_vocab_size = 2, embedding_size = 0;
};

/// @ingroup ch08
/// Parameters of the encoder with its pooler (no output head), counted as BERT's code builds it:
/// embeddings (word, position, type, with E wide and projected to H when factorised, and one
/// LayerNorm), per layer \f$ 4(H^2 + H) \f$ for attention, \f$ 2HF + F + H \f$ for the FFN and two LayerNorms
/// of \f$ 2H \f$, and the pooler \f$ H^2 + H \f$. With `share_layers` the layers count once (ALBERT). Errors:
/// a size that is not positive (embedding_size may be 0).
long long encoder_parameters(const EncoderShape& shape, bool share_layers);

}  // namespace tvlab::analysis

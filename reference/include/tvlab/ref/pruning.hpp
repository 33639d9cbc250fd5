#pragma once
/// @file
/// Chapter 08, pruning (000 L283–L287): removing weights instead of shortening them.
///
/// - **Unstructured (magnitude) pruning** zeroes the fraction s of the weights of smallest |w|. It
///   keeps the most accuracy per weight removed, but the zeros lie anywhere: a dense kernel still
///   multiplies by them, so it saves nothing without a sparse format and hardware that uses it.
/// - **2:4 semi-structured pruning** keeps the 2 largest |w| of every 4 consecutive weights of a
///   row: exactly half, in a pattern regular enough for NVIDIA's sparse tensor cores (Ampere and
///   later) and for a simple compressed format: the kept values, and a 2-bit position for each
///   (`Sparse24`). A product with it reads half the values and does half the multiplications.
/// - **Structured pruning** removes whole units. For attention heads (Michel et al. 2019, "Are
///   Sixteen Heads Really Better than One?"): the layer's output is a sum over heads,
///   \f$ O = \sum_h \mathrm{head}_h W_O^{(h)} \f$, so masking head h changes it by exactly
///   \f$ \mathrm{head}_h W_O^{(h)} \f$: the size of that term is the head's importance on the data,
///   and the least important heads are removed first.

#include <cstdint>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// w `[rows, cols]` with the round(s * size) weights of smallest |w| set to 0 (ties: the earlier
/// in row-major order goes first). Errors: s outside [0, 1], an empty w, a value that is not finite.
Tensor2 magnitude_prune(const Tensor2& w, double sparsity);

/// @ingroup ch08
/// A 2:4-sparse matrix: for every group of 4 weights of a row, its 2 kept values (in order of
/// position) and their positions 0–3 within the group.
struct Sparse24 {
  std::size_t rows = 0, cols = 0;
  std::vector<float> values;           ///< rows * cols / 2
  std::vector<std::uint8_t> positions;  ///< one per value, 0 to 3
};

/// @ingroup ch08
/// Keeps the 2 largest |w| of each group of 4 (ties: the lower position). Errors: cols not a
/// multiple of 4, an empty w, a value that is not finite.
Sparse24 prune_2_4(const Tensor2& w);

/// @ingroup ch08
/// The checks of a 2:4 matrix, public so that every product rejects the same input with the same
/// message: cols a multiple of 4, rows * cols / 2 values and as many positions, each group's two
/// positions in 0–3 and increasing, finite values.
void validate_sparse_2_4(const char* function, const Sparse24& s);
/// @ingroup ch08
/// The dense matrix a 2:4 matrix stands for (zeros where nothing was kept). Errors: a malformed s
/// (`validate_sparse_2_4`).
Tensor2 densify(const Sparse24& s);

/// @ingroup ch08
/// y = S x, touching only the kept values: \f$ y_r = \sum_{g} \sum_{k \in \mathrm{kept}(r, g)} v_k\, x_{4g + p_k} \f$,
/// summed in double. Errors: x of another length, a value of x that is not finite, a malformed S.
Tensor1 sparse_2_4_gemv(const Sparse24& s, const Tensor1& x);

/// @ingroup ch08
/// Multi-head attention's output projection seen head by head: heads `[h, n, d_h]` (each head's
/// attention output) and w_o `[h d_h, d_model]`. Returns, for each head, its importance
/// \f$ \lVert \mathrm{head}_h W_O^{(h)} \rVert_F / \lVert O \rVert_F \f$: the relative change of the
/// output when that head alone is masked. Errors: shapes that do not fit, values that are not
/// finite, an output that is all zero.
std::vector<double> head_importance(const Tensor3& heads, const Tensor2& w_o);

/// @ingroup ch08
/// The output `[n, d_model]` with the heads whose `keep` entry is false masked:
/// \f$ \sum_{h\ \text{kept}} \mathrm{head}_h W_O^{(h)} \f$. Errors as `head_importance`, and a mask of
/// another length.
Tensor2 masked_head_output(const Tensor3& heads, const Tensor2& w_o, const std::vector<bool>& keep);

}  // namespace tvlab::ref

#pragma once
/// @file
/// The data movement around an MoE layer's experts (chapter 09): tokens grouped by expert before
/// the products (**dispatch**) and put back in token order, weighted by their gates, after them
/// (**combine**). The same two steps, with ranks in place of experts, are expert parallelism's
/// all-to-all exchanges.

#include <cstddef>
#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch09
/// The routing's assignments sorted by expert, stable (each expert's rows in the routing's
/// order): expert e's rows are `first[e]` .. `first[e + 1]`, row i holds token `token[i]`, and
/// assignment a went to row `row_of[a]`. With `num_shared` shared experts, experts E .. E + S - 1
/// follow, each with every token in order (gate 1).
struct ExpertBatches {
  std::vector<std::size_t> first;
  std::vector<std::size_t> token;
  std::vector<std::size_t> row_of;
  /// The number of rows, all experts together.
  std::size_t rows() const { return token.size(); }
};

/// @ingroup ch09
/// The grouping above, by a counting sort: O(assignments + E). The routing must be valid
/// (`validate_routing`).
ExpertBatches group_by_expert(const Routing& r, std::size_t num_shared);

/// @ingroup ch09
/// Rows `[begin, end)` of the grouping gathered from x `[tokens, d_model]` into `out` (row-major,
/// (end - begin) x d_model).
void gather_rows(const Tensor2& x, const ExpertBatches& b, std::size_t begin, std::size_t end, float* out);

/// @ingroup ch09
/// y `[tokens, d_model]`: each token's \f$ \sum_a g_a Y_{\mathrm{row}(a)} \f$ over its assignments in the
/// routing's order, then its shared experts' rows; `expert_out` holds the experts' outputs in the
/// grouping's row order `[b.rows(), d_model]`. Threads over tokens. Returns whether every output
/// is finite (through `finite`).
Tensor2 combine_rows(const std::vector<float>& expert_out, const ExpertBatches& b, const Routing& r, std::size_t num_shared,
                     std::size_t d_model, bool& finite);

}  // namespace tvlab::opt

#pragma once
/// @file
/// Learned absolute position embeddings (GPT-2, BERT): a table with one trained row per position
/// (chapter 02). The lookup shows why they cannot extrapolate: there is no row to return for a
/// position the table does not have.

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch02
/// Rows `first_position .. first_position + count - 1` of `table` `[max_positions, d_model]`.
/// Throws `tvlab::Error` naming `position` when a requested position is at or beyond
/// `max_positions` (the table has no row for it: such a model cannot be run past its training
/// length, unlike sinusoidal encodings or RoPE, which are formulas of the position), and for
/// count <= 0, first_position < 0 or an empty table.
Tensor2 learned_position_embedding(const Tensor2& table, long long first_position, long long count);

}  // namespace tvlab::ref

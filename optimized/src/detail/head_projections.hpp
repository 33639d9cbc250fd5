#pragma once
// The projections of a grouped-query layer into heads and back, as SGEMMs: shared by
// `opt::grouped_query_attention` (gqa_attention.cpp) and the KV cache's prefill and decode
// (kv_cache.cpp). They compute what the reference's loops compute (reference/src/gqa_detail.hpp)
// and count the same multiply-adds. Inputs already checked.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "blas.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt::detail {

/// Rows `first` .. end of x times the columns of w, as heads: y[head, i, e] = sum_c x[first + i, c]
/// w[c, head d_k + e], one SGEMM [rows, d] x [d, heads d_k], then the columns split into heads.
/// Adds rows d (heads d_k) to `macs`, the reference's count.
inline Tensor3 project_to_heads(const Tensor2& x, std::size_t first, const Tensor2& w, std::size_t heads,
                                std::size_t head_dim, std::uint64_t& macs) {
  const std::size_t rows = x.shape()[0] - first, d = x.shape()[1], width = heads * head_dim;
  std::vector<float> projected(rows * width);
  sgemm(rows, width, d, 1.0f, x.data() + first * d, d, w.data(), width, false, 0.0f, projected.data(), width);
  Tensor3 y = Tensor3::from_shape({heads, rows, head_dim});
  for (std::size_t head = 0; head < heads; ++head)
    for (std::size_t i = 0; i < rows; ++i)
      std::copy_n(projected.data() + i * width + head * head_dim, head_dim, y.data() + (head * rows + i) * head_dim);
  macs += static_cast<std::uint64_t>(rows) * d * width;
  return y;
}

/// Concat_t(o_t) W_o: the heads side by side [rows, h d_k], then one SGEMM with w_o. Adds
/// rows (h d_k) d_model to `macs`.
inline Tensor2 project_from_heads(const Tensor3& o, const Tensor2& w_o, std::uint64_t& macs) {
  const std::size_t heads = o.shape()[0], rows = o.shape()[1], head_dim = o.shape()[2], width = heads * head_dim;
  const std::size_t d_model = w_o.shape()[1];
  std::vector<float> concat(rows * width);
  for (std::size_t head = 0; head < heads; ++head)
    for (std::size_t i = 0; i < rows; ++i)
      std::copy_n(o.data() + (head * rows + i) * head_dim, head_dim, concat.data() + i * width + head * head_dim);
  Tensor2 y = Tensor2::from_shape({rows, d_model});
  sgemm(rows, d_model, width, 1.0f, concat.data(), width, w_o.data(), d_model, false, 0.0f, y.data(), d_model);
  macs += static_cast<std::uint64_t>(rows) * width * d_model;
  return y;
}

}  // namespace tvlab::opt::detail

#include "tvlab/core/ffn_types.hpp"

#include "tvlab/core/error.hpp"

namespace tvlab {

std::size_t validate_ffn(const char* fn, const Tensor2& x, const FfnWeights& w) {
  require_nonempty(fn, "x", x);
  require_nonempty(fn, "w1", w.w1);
  const std::size_t d_model = x.shape()[1], d_ff = w.w1.shape()[1];
  require_dim(fn, "w1", w.w1, 0, "rows", d_model, "d_model, the columns of x");
  require_dim(fn, "w2", w.w2, 0, "rows", d_ff, "d_ff, the columns of w1");
  require_dim(fn, "w2", w.w2, 1, "columns", d_model, "d_model");
  if (w.b1.size() != 0) require_dim(fn, "b1", w.b1, 0, "length", d_ff, "d_ff, or empty for no bias");
  if (w.b2.size() != 0) require_dim(fn, "b2", w.b2, 0, "length", d_model, "d_model, or empty for no bias");
  require_finite(fn, "x", x);
  require_finite(fn, "w1", w.w1);
  require_finite(fn, "w2", w.w2);
  require_finite(fn, "b1", w.b1);
  require_finite(fn, "b2", w.b2);
  return d_ff;
}

std::size_t validate_swiglu(const char* fn, const Tensor2& x, const SwigluWeights& w) {
  require_nonempty(fn, "x", x);
  require_nonempty(fn, "w1", w.w1);
  const std::size_t d_model = x.shape()[1], d_ff = w.w1.shape()[1];
  require_dim(fn, "w1", w.w1, 0, "rows", d_model, "d_model, the columns of x");
  require_dim(fn, "w2", w.w2, 0, "rows", d_model, "d_model, the columns of x");
  require_dim(fn, "w2", w.w2, 1, "columns", d_ff, "d_ff, the columns of w1");
  require_dim(fn, "w3", w.w3, 0, "rows", d_ff, "d_ff, the columns of w1");
  require_dim(fn, "w3", w.w3, 1, "columns", d_model, "d_model");
  require_finite(fn, "x", x);
  require_finite(fn, "w1", w.w1);
  require_finite(fn, "w2", w.w2);
  require_finite(fn, "w3", w.w3);
  return d_ff;
}

}  // namespace tvlab

#pragma once
/// @file
/// `tvlab::Error` and the checks every public function runs on its inputs.
///
/// Messages name the function, the parameter, what was expected and what was given:
/// `scaled_dot_product_attention: k has head_dim 5, expected 4 (the head_dim of q)`.

#include <cmath>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tvlab {

/// Bad input: a wrong shape, an out-of-range size, a NaN where no result is defined.
class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& what) : std::invalid_argument(what) {}
};

/// Thrown by the exercise stubs in `tvlab::student` until the student writes the code.
class NotImplemented : public std::logic_error {
 public:
  explicit NotImplemented(const std::string& what) : std::logic_error("not implemented: " + what) {}
};

/// Builds a message piece by piece: `fail(fn, "num_heads (", h, ") must be positive")`.
template <class... Parts>
[[noreturn]] void fail(std::string_view function, const Parts&... parts) {
  std::ostringstream out;
  out << function << ": ";
  (out << ... << parts);
  throw Error(out.str());
}

/// Throws `Error` with the message when `condition` is false.
template <class... Parts>
void require(bool condition, std::string_view function, const Parts&... parts) {
  if (!condition) fail(function, parts...);
}

/// Requires a positive size: `require_positive("gqa", "num_heads", h)`.
template <class Int>
void require_positive(std::string_view function, std::string_view name, Int value) {
  if (!(value > 0)) fail(function, name, " (", value, ") must be positive");
}

/// Requires every element of a tensor to be finite (no NaN or infinity).
template <class T>
void require_finite(std::string_view function, std::string_view name, const T& tensor) {
  std::size_t index = 0;
  for (auto value : tensor) {
    if (!std::isfinite(static_cast<double>(value))) {
      fail(function, name, " has a non-finite value (", value, ") at flat index ", index);
    }
    ++index;
  }
}

/// The largest \f$ |x_i| \f$ of n contiguous floats in one pass, or +inf when some element is NaN or
/// infinite. It works on the bit patterns: with the sign bit cleared, finite floats order as their
/// bits do as integers, and every infinity and NaN lies at or above `0x7f800000`, so one integer
/// maximum (a loop the compiler vectorises) answers both questions.
float max_abs_or_inf(const float* x, std::size_t n);

/// Requires every element of a contiguous float tensor (`Tensor1` ... `Tensor4`) to be finite, as
/// `require_finite`, and returns the largest \f$ |x_i| \f$: one fast pass, and the element-by-element
/// search for the first bad index only when there is one.
template <class T>
float require_finite_max_abs(std::string_view function, std::string_view name, const T& tensor) {
  const float max_abs = max_abs_or_inf(tensor.data(), tensor.size());
  if (!std::isfinite(max_abs)) require_finite(function, name, tensor);
  return max_abs;
}

/// Requires every element to be finite or -inf (a masked logit): no NaN, no +inf.
template <class T>
void require_finite_or_neg_inf(std::string_view function, std::string_view name, const T& tensor) {
  std::size_t index = 0;
  for (auto value : tensor) {
    const double v = static_cast<double>(value);
    if (std::isnan(v) || v == HUGE_VAL) {
      fail(function, name, " contains ", value, " at flat index ", index,
           "; only finite values and -inf (weight 0) are allowed");
    }
    ++index;
  }
}

/// Requires a tensor to have no zero-length dimension.
template <class T>
void require_nonempty(std::string_view function, std::string_view name, const T& tensor) {
  for (std::size_t axis = 0; axis < tensor.dimension(); ++axis) {
    if (tensor.shape()[axis] == 0) {
      fail(function, name, " must not be empty (axis ", axis, " has length 0)");
    }
  }
}

/// Requires `tensor.shape()[axis] == expected`: "k has head_dim 5, expected 4 (why)".
template <class T>
void require_dim(std::string_view function, std::string_view name, const T& tensor, std::size_t axis,
                 std::string_view axis_name, std::size_t expected, std::string_view why) {
  const std::size_t got = tensor.shape()[axis];
  if (got != expected) fail(function, name, " has ", axis_name, " ", got, ", expected ", expected, " (", why, ")");
}

}  // namespace tvlab

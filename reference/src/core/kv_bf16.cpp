#include "tvlab/core/kv_bf16.hpp"

#include "tvlab/core/dtype.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab {

float Bf16Kv::value(std::size_t h, std::size_t t, std::size_t c) const {
  return bf16_bits_to_float(bits[(h * capacity + t) * head_dim + c]);
}

Bf16Kv to_bf16_kv(const Tensor3& x) {
  require_nonempty("to_bf16_kv", "x", x);
  require_finite("to_bf16_kv", "x", x);
  Bf16Kv out{.heads = x.shape()[0], .capacity = x.shape()[1], .head_dim = x.shape()[2], .bits = {}};
  out.bits.reserve(x.size());
  for (const float value : x) out.bits.push_back(float_to_bf16_bits(value));
  return out;
}

void validate_bf16_kv(const char* function, const char* name, const Bf16Kv& x) {
  require(x.heads > 0 && x.capacity > 0 && x.head_dim > 0, function, name, " is empty (", x.heads, " heads, ",
          x.capacity, " positions, head_dim ", x.head_dim, "): make it from a non-empty tensor with to_bf16_kv");
  require(x.bits.size() == x.heads * x.capacity * x.head_dim, function, name, " holds ", x.bits.size(),
          " values; its shape [", x.heads, ", ", x.capacity, ", ", x.head_dim, "] needs ",
          x.heads * x.capacity * x.head_dim);
}

Tensor3 from_bf16_kv(const Bf16Kv& x) {
  validate_bf16_kv("from_bf16_kv", "x", x);
  Tensor3 out = Tensor3::from_shape({x.heads, x.capacity, x.head_dim});
  for (std::size_t e = 0; e < x.bits.size(); ++e) out.data()[e] = bf16_bits_to_float(x.bits[e]);
  return out;
}

}  // namespace tvlab

#include "tvlab/ref/quantized_gemv.hpp"

#include "tvlab/core/error.hpp"
#include "tvlab/ref/block_quant.hpp"

namespace tvlab::ref {
namespace {

constexpr std::size_t kBlock = 32;

}  // namespace

void validate_quantized_gemv(const char* function, const QuantizedMatrix& w, const Tensor1& x) {
  validate_quantized(function, w);
  require(w.type == GgmlType::q8_0 || w.type == GgmlType::q4_0, function, "w.type (", type_name(w.type),
          ") must be Q8_0 or Q4_0");
  require(x.size() == w.cols, function, "x has ", x.size(), " values, expected w.cols = ", w.cols);
  require_finite(function, "x", x);
}

std::vector<std::uint8_t> quantize_activations_q8_0(const Tensor1& x) {
  require_block_multiple("quantize_activations_q8_0", "x's length", x.size(), GgmlType::q8_0);
  require_finite("quantize_activations_q8_0", "x", x);
  std::vector<std::uint8_t> blocks(x.size() / kBlock * block_bytes(GgmlType::q8_0));
  for (std::size_t b = 0; b < x.size() / kBlock; ++b)
    quantize_block_q8_0(x.data() + b * kBlock, blocks.data() + b * block_bytes(GgmlType::q8_0));
  return blocks;
}

Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x) {
  validate_quantized_gemv("quantized_gemv", w, x);
  const std::vector<std::uint8_t> xq = quantize_activations_q8_0(x);
  const std::size_t blocks = w.cols / kBlock, w_bytes = block_bytes(w.type), x_bytes = block_bytes(GgmlType::q8_0);
  Tensor1 y = Tensor1::from_shape({w.rows});
  for (std::size_t r = 0; r < w.rows; ++r) {
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint8_t* wb = w.row(r) + b * w_bytes;
      const std::uint8_t* xb = xq.data() + b * x_bytes;
      // sumi = sum_j w_j x_j, exact in integers
      std::int32_t sumi = 0;
      for (std::size_t j = 0; j < kBlock; ++j) sumi += block_code(w.type, wb, j) * static_cast<std::int8_t>(xb[2 + j]);
      // the scales, once per block: sumi (d_w d_x) for Q8_0, (sumi d_w) d_x for Q4_0
      const float d_w = read_fp16(wb), d_x = read_fp16(xb);
      if (w.type == GgmlType::q8_0)
        sum += static_cast<float>(sumi) * (d_w * d_x);
      else
        sum += static_cast<float>(sumi) * d_w * d_x;
    }
    y(r) = sum;
  }
  return y;
}

}  // namespace tvlab::ref

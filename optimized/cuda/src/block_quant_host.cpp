// Host-tensor entry points of chapter 08's CUDA kernels: validate as the reference does, upload,
// call the device entry points of block_quant_device.hpp, download. Compiled with or without nvcc.

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/block_quant.hpp"
#include "tvlab/cuda/block_quant_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/ref/block_quant.hpp"
#include "tvlab/ref/quantized_gemv.hpp"

namespace tvlab::cuda {

Tensor2 dequantize(const QuantizedMatrix& q) {
  ref::validate_dequantize("dequantize", q);
  Tensor2 y = Tensor2::from_shape({q.rows, q.cols});
  DeviceBuffer<std::uint8_t> blocks(q.bytes.data(), q.bytes.size());
  DeviceBuffer<float> out(y.size());
  device::dequantize_blocks(static_cast<std::uint32_t>(q.type), blocks.get(), q.rows, q.cols, out.get());
  out.download(y.data());
  return y;
}

Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x) {
  ref::validate_quantized_gemv("quantized_gemv", w, x);
  const std::vector<std::uint8_t> x_blocks =
      w.type == GgmlType::q4_K ? ref::quantize_activations_q8_k(x) : ref::quantize_activations_q8_0(x);
  Tensor1 y = Tensor1::from_shape({w.rows});
  DeviceBuffer<std::uint8_t> weights(w.bytes.data(), w.bytes.size()), activations(x_blocks.data(), x_blocks.size());
  DeviceBuffer<float> out(w.rows);
  device::quantized_gemv(static_cast<std::uint32_t>(w.type), weights.get(), w.rows, w.cols, activations.get(), out.get());
  out.download(y.data());
  return y;
}

std::vector<std::uint8_t> fp8_encode(const Tensor1& x, ref::Fp8Format format, ref::Overflow overflow) {
  require_nonempty("fp8_encode", "x", x);
  std::vector<std::uint8_t> codes(x.size());
  DeviceBuffer<float> in(x.data(), x.size());
  DeviceBuffer<std::uint8_t> out(codes.size());
  device::fp8_encode(in.get(), x.size(), format == ref::Fp8Format::e4m3, overflow == ref::Overflow::saturate, out.get());
  out.download(codes.data());
  return codes;
}

}  // namespace tvlab::cuda

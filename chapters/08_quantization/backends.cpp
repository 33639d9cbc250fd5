#include "backends.hpp"

#include "tvlab/cuda/block_quant.hpp"
#include "tvlab/opt/block_quant.hpp"
#include "tvlab/opt/fp8.hpp"
#include "tvlab/opt/pruning.hpp"
#include "tvlab/opt/quantized_gemv.hpp"
#include "tvlab/ref/block_quant.hpp"
#include "tvlab/ref/fp8.hpp"
#include "tvlab/ref/quantized_gemv.hpp"
#include "tvlab/student/block_quant.hpp"
#include "tvlab/student/fp8.hpp"

namespace tvlab::quant {

// Every implementation, in the order the lesson reads them: the reference, the optimized CPU
// version, the CUDA kernels (dequantize and the product), the student's (the exercised block functions and the FP8 encoder).
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
      {.name = "ref",
       .kind = BackendKind::reference,
       .quantize = [](const Tensor2& x, GgmlType type) { return ref::quantize(x, type); },
       .dequantize = [](const QuantizedMatrix& q) { return ref::dequantize(q); },
       .quantized_gemv = ref::quantized_gemv,
       .quantize_block_q8_0 = ref::quantize_block_q8_0,
       .quantize_block_q4_0 = ref::quantize_block_q4_0,
       .fp8_encode_e4m3 = [](float x) { return ref::fp8_encode(x, ref::Fp8Format::e4m3, ref::Overflow::saturate); },
       .fp8_encode = [](const Tensor1& x, ref::Fp8Format f, ref::Overflow o) { return ref::fp8_encode(x, f, o); },
       .fp8_decode = [](const std::vector<std::uint8_t>& c, ref::Fp8Format f) { return ref::fp8_decode(c, f); },
       .sparse_2_4_gemv = ref::sparse_2_4_gemv},
      {.name = "opt",
       .kind = BackendKind::optimized,
       .quantize = [](const Tensor2& x, GgmlType type) { return opt::quantize(x, type); },
       .dequantize = [](const QuantizedMatrix& q) { return opt::dequantize(q); },
       .quantized_gemv = opt::quantized_gemv,
       .fp8_encode = opt::fp8_encode,
       .fp8_decode = opt::fp8_decode,
       .sparse_2_4_gemv = opt::sparse_2_4_gemv},
      {.name = "cuda",
       .kind = BackendKind::cuda,
       .caps = {.needs_device = true},
       .dequantize = [](const QuantizedMatrix& q) { return cuda::dequantize(q); },
       .quantized_gemv = cuda::quantized_gemv,
       .fp8_encode = cuda::fp8_encode},
      {.name = "student",
       .kind = BackendKind::student,
       .quantize_block_q8_0 = student::quantize_block_q8_0,
       .quantize_block_q4_0 = student::quantize_block_q4_0,
       .fp8_encode_e4m3 = student::fp8_encode_e4m3},
  };
  return all;
}

}  // namespace tvlab::quant

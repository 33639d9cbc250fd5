#pragma once
/// @file
/// Chapter 08's backend registry (see `chapters/common/backend.hpp`): every implementation of the
/// chapter's functions, ggml's block formats (a matrix quantized to bytes and back, and the
/// exercised block functions), with what it needs.

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/fp8.hpp"
#include "tvlab/ref/pruning.hpp"

namespace tvlab::quant {

/// Every row of x `[rows, cols]` in blocks of 32 of a block type. (`ref::quantize`'s contract.)
using QuantizeFn = std::function<QuantizedMatrix(const Tensor2& x, GgmlType type)>;
/// The matrix the blocks stand for. (`ref::dequantize`'s contract.)
using DequantizeFn = std::function<Tensor2(const QuantizedMatrix& q)>;
/// y = W x with W in Q8_0 or Q4_0 and x quantized to Q8_0, or W in Q4_K and x in Q8_K.
/// (`ref::quantized_gemv`'s contract.)
using GemvFn = std::function<Tensor1(const QuantizedMatrix& w, const Tensor1& x)>;
/// One block of 32 floats into its bytes. (`ref::quantize_block_q8_0`'s contract, and Q4_0's.)
using BlockFn = std::function<void(const float* x, std::uint8_t* block)>;
/// Every value of x as an FP8 code. (`ref::fp8_encode(x, format, overflow)`'s contract, on a tensor.)
using Fp8EncodeFn = std::function<std::vector<std::uint8_t>(const Tensor1& x, ref::Fp8Format format, ref::Overflow overflow)>;
/// Every FP8 code's value. (`ref::fp8_decode(codes, format)`'s contract, on a tensor.)
using Fp8DecodeFn = std::function<Tensor1(const std::vector<std::uint8_t>& codes, ref::Fp8Format format)>;
/// y = S x for a 2:4-sparse S, touching only the kept values. (`ref::sparse_2_4_gemv`'s contract.)
using Sparse24GemvFn = std::function<Tensor1(const ref::Sparse24& s, const Tensor1& x)>;

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  QuantizeFn quantize;            ///< a matrix into blocks (empty: not provided)
  DequantizeFn dequantize;        ///< blocks back to floats (empty: not provided)
  GemvFn quantized_gemv;          ///< the quantized matrix-vector product (empty: not provided)
  BlockFn quantize_block_q8_0;    ///< one Q8_0 block (exercise 08.1; empty: not provided)
  BlockFn quantize_block_q4_0;    ///< one Q4_0 block (exercise 08.2; empty: not provided)
  /// A float's FP8 E4M3 code, saturating (`ref::fp8_encode(x, e4m3, saturate)`'s contract; exercise
  /// 08.3; empty: not provided).
  std::function<std::uint8_t(float)> fp8_encode_e4m3;
  Fp8EncodeFn fp8_encode;          ///< FP8 codes of a tensor (empty: not provided)
  Fp8DecodeFn fp8_decode;          ///< FP8 values of codes (empty: not provided)
  Sparse24GemvFn sparse_2_4_gemv;  ///< the 2:4-sparse product (empty: not provided)
};

/// ref, opt, cuda, student.
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::quant

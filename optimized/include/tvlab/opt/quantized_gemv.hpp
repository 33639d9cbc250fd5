#pragma once
/// @file
/// The quantized matrix–vector product on the CPU (chapter 08): the same bits as
/// `tvlab::ref::quantized_gemv`. The integer dot of a block is one instruction on 32 byte pairs
/// (AVX-512 VNNI's `vpdpbusd`, or AVX2's `vpmaddubsw` and `vpmaddwd`; Q4_0 with AVX-512 VNNI: two
/// blocks per 512-bit instruction), eight blocks' lane sums are
/// reduced together by a tree of horizontal adds (integers: any order gives the same sum), the
/// eight per-block float terms are computed in one register with the reference's roundings, and
/// the terms of a row are added in the reference's order, four rows at a time so that the four
/// chains of dependent additions overlap. Threads take groups of rows.

#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch08
/// Same contract, errors and bits as `ref::quantized_gemv`.
Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x);

}  // namespace tvlab::opt

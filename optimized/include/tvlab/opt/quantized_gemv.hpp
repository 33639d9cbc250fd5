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
///
/// Q4_K: a super-block's eight sub-blocks are four 32-byte runs of nibbles, each split into its low
/// and high halves (two sub-blocks); `vpmaddubsw` gives the nibble-times-code pair sums as int16 and
/// `vpmaddwd` (AVX-512 VNNI: `vpdpwssd`) multiplies them by the sub-block's 6-bit scale and adds
/// them in int32, so S needs no separate multiplication; the 6-bit scales and mins are unpacked with
/// four 32-bit mask-and-shift steps. Eight super-blocks' S and M are reduced together, their float
/// terms made in one register, and added in the reference's order.

#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch08
/// Same contract, errors and bits as `ref::quantized_gemv`.
Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x);

}  // namespace tvlab::opt

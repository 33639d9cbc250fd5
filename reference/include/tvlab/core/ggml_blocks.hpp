#pragma once
/// @file
/// The block formats of ggml / llama.cpp (and of GGUF files), as bytes: the type numbers, the
/// block layouts and a quantized matrix (chapter 08). Shared by the reference, the optimized code
/// and the GGUF reader and writer, so that "the same bytes" means the same thing everywhere.
///
/// A row of n weights is cut into blocks of 32 (256 for the K-quants); each block is stored as
/// its scale(s) in fp16 followed by its integer codes, packed. The layouts are ggml's
/// (`ggml/src/ggml-common.h`), byte for byte:
///
/// | type | block | bytes | layout | bits per weight |
/// | --- | --- | --- | --- | --- |
/// | Q8_0 | 32 | 34 | fp16 d, int8 q[32] | 8.5 |
/// | Q4_0 | 32 | 18 | fp16 d, 16 bytes of nibbles | 4.5 |
/// | Q4_1 | 32 | 20 | fp16 d, fp16 m, 16 bytes of nibbles | 5.0 |
/// | Q5_0 | 32 | 22 | fp16 d, 4 bytes of fifth bits, 16 bytes of nibbles | 5.5 |
/// | Q5_1 | 32 | 24 | fp16 d, fp16 m, 4 bytes of fifth bits, 16 bytes of nibbles | 6.0 |
/// | Q6_K | 256 | 210 | 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, int8 scales[16], fp16 d | 6.5625 |
/// | Q5_K | 256 | 176 | fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins, 32 bytes of fifth bits, 128 bytes of nibbles | 5.5 |
/// | Q4_K | 256 | 144 | fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles | 4.5 |
/// | Q3_K | 256 | 110 | 32 bytes of third bits, 64 bytes of 2-bit pairs, 12 bytes of 6-bit scales, fp16 d | 3.4375 |
/// | Q2_K | 256 | 84 | 16 bytes of 4-bit scales and mins, 64 bytes of 2-bit pairs, fp16 d, fp16 dmin | 2.625 |
///
/// In the blocks of 32, byte j of the nibbles holds element j in its low half and element j + 16 in its high half;
/// bit j of the fifth bits (read as a little-endian uint32) is element j's fifth bit.
///
/// The K-quants store a super-block of 256 weights (QK_K), cut into sub-blocks that each have
/// their own scale; the sub-block scales are themselves quantized against one fp16 super-block
/// scale, so a finer grid of scales costs few bits:
///
/// - **Q4_K**: 8 sub-blocks of 32. Sub-block j has a 6-bit scale code \f$ s_j \f$ and a 6-bit min
///   code \f$ m_j \f$; the weight is \f$ \hat x = d\, s_j\, q - d_{min}\, m_j \f$ with a 4-bit q. The
///   16 codes of 6 bits fill the 12 bytes `scales`: for j < 4, byte j holds \f$ s_j \f$ and byte
///   j + 4 holds \f$ m_j \f$ (low 6 bits); for j >= 4, byte j + 4 holds the low 4 bits of
///   \f$ s_j \f$ (low half) and of \f$ m_j \f$ (high half), and their top 2 bits go to the free
///   bits 6-7 of byte j - 4 (\f$ s_j \f$) and byte j (\f$ m_j \f$). The nibbles come in 4 runs of 32
///   bytes: byte l of run c holds element 64c + l (low half) and 64c + 32 + l (high half).
/// - **Q6_K**: 16 sub-blocks of 16, each with an int8 scale \f$ s_j \f$; the weight is
///   \f$ \hat x = d\, s_j\, (q - 32) \f$ with a 6-bit q, split into its low 4 bits (`ql`) and its high
///   2 bits (`qh`). In each half of 128 elements (64 bytes of ql, 32 of qh), byte l of ql holds
///   elements l and l + 64 (low, high half), byte l + 32 elements l + 32 and l + 96; byte l of qh
///   holds the high pairs of elements l, l + 32, l + 64, l + 96 in bits 0-1, 2-3, 4-5, 6-7.
/// - **Q5_K**: Q4_K with a fifth bit: the same d, dmin and 12 bytes of scale and min codes, codes
///   q in [0, 31]; the low 4 bits in Q4_K's nibbles, the fifth bit of element 64c + l (c < 4, l < 32)
///   in bit 2c of byte l of `qh`, that of element 64c + 32 + l in bit 2c + 1.
/// - **Q3_K**: 16 sub-blocks of 16, each with a 6-bit scale code \f$ s_j \f$ stored with an offset of 32;
///   the weight is \f$ \hat x = d\, (s_j - 32)\, (q - 4) \f$ with a 3-bit q. The low 2 bits of q: in each half
///   of 128 elements (32 bytes of `qs`), byte l holds elements l, l + 32, l + 64, l + 96 in bits 0-1,
///   2-3, 4-5, 6-7; the third bit of element e is bit e / 32 of byte e % 32 of `hmask`. The scale
///   codes: the low 4 bits of \f$ s_j \f$ in byte j (j < 8, low half) or byte j - 8 (high half) of the 12
///   bytes, the top 2 bits in bits 2 (j / 4) to 2 (j / 4) + 1 of byte 8 + j % 4.
/// - **Q2_K**: 16 sub-blocks of 16, each with a 4-bit scale code \f$ s_j \f$ and a 4-bit min code
///   \f$ m_j \f$ (byte j: \f$ s_j \f$ in the low half, \f$ m_j \f$ in the high); the weight is
///   \f$ \hat x = d\, s_j\, q - d_{min}\, m_j \f$ with a 2-bit q, packed as Q3_K's low bits.

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tvlab {

/// ggml's type numbers (`enum ggml_type`), as GGUF files store them.
enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q2_K = 10,
  q3_K = 11,
  q4_K = 12,
  q5_K = 13,
  q6_K = 14,
};

/// The types the chapter quantizes to, in the order of the lesson's tables.
const std::vector<GgmlType>& quantized_types();

/// "Q8_0", "Q4_0", ... as llama.cpp names them ("F32", "F16" for the float types).
std::string type_name(GgmlType type);

/// Prints type_name(type) (so that tests and messages show "Q4_0", not a number).
inline std::ostream& operator<<(std::ostream& out, GgmlType type) { return out << type_name(type); }

/// The type called `name` ("Q4_0", case-insensitive); a tvlab::Error naming `function` and the
/// list of known types otherwise.
GgmlType type_from_name(const char* function, const std::string& name);

/// True for the K-quants Q2_K ... Q6_K (super-blocks of 256).
bool is_k_quant(GgmlType type);

/// Weights per block: 32 for Q8_0 ... Q5_1, 256 (a super-block) for the K-quants, 1 for F32 and F16.
std::size_t block_size(GgmlType type);

/// Bytes per block (34 for Q8_0, 18 for Q4_0, ..., 84 for Q2_K, 110 for Q3_K, 144 for Q4_K, 176 for
/// Q5_K, 210 for Q6_K; 4 for F32, 2 for F16).
std::size_t block_bytes(GgmlType type);

/// Storage cost: 8 block_bytes / block_size (8.5 for Q8_0, 4.5 for Q4_0).
double bits_per_weight(GgmlType type);

/// True when `number` is one of the GgmlType values above.
bool is_known_type(std::uint32_t number);

/// The fp16 number stored little-endian at `bytes` (as ggml writes its scales on every machine).
float read_fp16(const std::uint8_t* bytes);

/// `value` rounded to fp16 (to nearest even) and stored little-endian at `bytes`.
void write_fp16(float value, std::uint8_t* bytes);

/// A matrix [rows, cols] in one of the formats: each row is cols / block_size blocks, rows one
/// after the other, exactly as a GGUF file stores a 2-D tensor (ggml's dimension 0 is `cols`).
struct QuantizedMatrix {
  GgmlType type = GgmlType::q8_0;
  std::size_t rows = 0, cols = 0;
  std::vector<std::uint8_t> bytes;

  std::size_t row_bytes() const { return cols / block_size(type) * block_bytes(type); }
  const std::uint8_t* row(std::size_t r) const { return bytes.data() + r * row_bytes(); }
  std::uint8_t* row(std::size_t r) { return bytes.data() + r * row_bytes(); }
};

/// Checks what every function taking a QuantizedMatrix needs: a known block type, cols a
/// multiple of its block size, and rows * row_bytes() bytes.
void validate_quantized(const char* function, const QuantizedMatrix& q);

/// Checks a row length for `type`: cols > 0 and a multiple of the block size (the error names
/// `name` and the block size).
void require_block_multiple(const char* function, const char* name, std::size_t cols, GgmlType type);

}  // namespace tvlab

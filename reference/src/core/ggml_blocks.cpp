#include "tvlab/core/ggml_blocks.hpp"

#include <algorithm>
#include <cctype>

#include "tvlab/core/dtype.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab {

const std::vector<GgmlType>& quantized_types() {
  static const std::vector<GgmlType> all = {GgmlType::q8_0, GgmlType::q5_1, GgmlType::q5_0, GgmlType::q4_1,
                                            GgmlType::q4_0, GgmlType::q6_K, GgmlType::q5_K, GgmlType::q4_K,
                                            GgmlType::q3_K, GgmlType::q2_K};
  return all;
}

std::string type_name(GgmlType type) {
  switch (type) {
    case GgmlType::f32: return "F32";
    case GgmlType::f16: return "F16";
    case GgmlType::q4_0: return "Q4_0";
    case GgmlType::q4_1: return "Q4_1";
    case GgmlType::q5_0: return "Q5_0";
    case GgmlType::q5_1: return "Q5_1";
    case GgmlType::q8_0: return "Q8_0";
    case GgmlType::q2_K: return "Q2_K";
    case GgmlType::q3_K: return "Q3_K";
    case GgmlType::q4_K: return "Q4_K";
    case GgmlType::q5_K: return "Q5_K";
    case GgmlType::q6_K: return "Q6_K";
  }
  return "type " + std::to_string(static_cast<std::uint32_t>(type));
}

float read_fp16(const std::uint8_t* bytes) {
  return fp16_bits_to_float(static_cast<std::uint16_t>(bytes[0] | (bytes[1] << 8)));
}

void write_fp16(float value, std::uint8_t* bytes) {
  const std::uint16_t bits = float_to_fp16_bits(value);
  bytes[0] = static_cast<std::uint8_t>(bits & 0xFF);
  bytes[1] = static_cast<std::uint8_t>(bits >> 8);
}

bool is_known_type(std::uint32_t number) {
  for (GgmlType t : {GgmlType::f32, GgmlType::f16, GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1,
                     GgmlType::q8_0, GgmlType::q2_K, GgmlType::q3_K, GgmlType::q4_K, GgmlType::q5_K, GgmlType::q6_K})
    if (static_cast<std::uint32_t>(t) == number) return true;
  return false;
}

GgmlType type_from_name(const char* function, const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  std::string known;
  std::vector<GgmlType> all = {GgmlType::f32, GgmlType::f16};
  all.insert(all.end(), quantized_types().begin(), quantized_types().end());
  for (GgmlType t : all) {
    if (type_name(t) == upper) return t;
    known += (known.empty() ? "" : ", ") + type_name(t);
  }
  fail(function, "type \"", name, "\" is not one of ", known);
}

bool is_k_quant(GgmlType type) {
  return type == GgmlType::q2_K || type == GgmlType::q3_K || type == GgmlType::q4_K || type == GgmlType::q5_K ||
         type == GgmlType::q6_K;
}

std::size_t block_size(GgmlType type) {
  if (type == GgmlType::f32 || type == GgmlType::f16) return 1;
  return is_k_quant(type) ? 256 : 32;  // QK_K, the K-quants' super-block
}

std::size_t block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::f32: return 4;
    case GgmlType::f16: return 2;
    case GgmlType::q4_0: return 2 + 16;
    case GgmlType::q4_1: return 2 + 2 + 16;
    case GgmlType::q5_0: return 2 + 4 + 16;
    case GgmlType::q5_1: return 2 + 2 + 4 + 16;
    case GgmlType::q8_0: return 2 + 32;
    case GgmlType::q2_K: return 16 + 64 + 2 + 2;        // 4-bit scales and mins, 2-bit codes, d, dmin
    case GgmlType::q3_K: return 32 + 64 + 12 + 2;       // high bits, low pairs, 6-bit scales, d
    case GgmlType::q4_K: return 2 + 2 + 12 + 128;       // d, dmin, 6-bit scales and mins, nibbles
    case GgmlType::q5_K: return 2 + 2 + 12 + 32 + 128;  // d, dmin, 6-bit scales and mins, fifth bits, nibbles
    case GgmlType::q6_K: return 128 + 64 + 16 + 2;      // low nibbles, high pairs, int8 scales, d
  }
  fail("block_bytes", "type (", static_cast<std::uint32_t>(type), ") is not a known ggml type");
}

double bits_per_weight(GgmlType type) {
  return 8.0 * static_cast<double>(block_bytes(type)) / static_cast<double>(block_size(type));
}

void require_block_multiple(const char* function, const char* name, std::size_t cols, GgmlType type) {
  require(cols > 0 && cols % block_size(type) == 0, function, name, " (", cols, ") must be a positive multiple of ",
          type_name(type), "'s block of ", block_size(type), " weights");
}

void validate_quantized(const char* function, const QuantizedMatrix& q) {
  require(is_known_type(static_cast<std::uint32_t>(q.type)), function, "q.type (",
          static_cast<std::uint32_t>(q.type), ") is not a known ggml type");
  require_block_multiple(function, "q.cols", q.cols, q.type);
  require(q.bytes.size() == q.rows * q.row_bytes(), function, "q.bytes holds ", q.bytes.size(), " bytes, expected ",
          q.rows * q.row_bytes(), " (", q.rows, " rows of ", q.row_bytes(), " bytes of ", type_name(q.type), ")");
}

}  // namespace tvlab

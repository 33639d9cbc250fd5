#pragma once
/// @file
/// GGUF version 3, the file format of llama.cpp (chapter 08): write one, read one back, every
/// field checked. The layout (little-endian throughout; `ggml/include/gguf.h`):
///
/// | field | type |
/// | --- | --- |
/// | magic | the 4 bytes "GGUF" |
/// | version | uint32, 3 (2 is read too: same layout) |
/// | tensor count, metadata count | uint64 each |
/// | metadata, one after the other | key (string), value type (uint32), value |
/// | tensor infos | name (string), dimension count (uint32, at most 4), dimensions (uint64 each, the row length first), ggml type (uint32), offset (uint64, from the start of the data) |
/// | padding | zero bytes up to a multiple of the alignment |
/// | data | each tensor's bytes at its offset, each padded to the alignment |
///
/// A string is its length (uint64) and its bytes, without a terminating zero. An array value is its
/// element type (uint32), its length (uint64) and its elements. The alignment is the metadata
/// `general.alignment` (a uint32 power of two) or 32. A 2-D tensor of ggml's dimensions
/// \f$ [n_0, n_1] \f$ is a matrix of \f$ n_1 \f$ rows of \f$ n_0 \f$ weights: `QuantizedMatrix`'s rows
/// and cols, in that order reversed.
///
/// The reader trusts nothing: every length, count, dimension, type, offset and size is checked
/// against the file before it is used, and a file that fails a check raises a `tvlab::Error`
/// naming the file, the byte offset and what was found there.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// GGUF's value types (`enum gguf_type`).
enum class GgufType : std::uint32_t {
  uint8 = 0, int8 = 1, uint16 = 2, int16 = 3, uint32 = 4, int32 = 5, float32 = 6, boolean = 7,
  string = 8, array = 9, uint64 = 10, int64 = 11, float64 = 12,
};

/// @ingroup ch08
/// One metadata value: its type, and the field that holds it (integers of every width in
/// `integer`, as signed 64-bit: a uint64 beyond \f$ 2^{63} \f$ in `unsigned_integer`; floats in
/// `real`; strings in `text`; an array's elements, all of `element_type`, in `elements`).
struct GgufValue {
  GgufType type = GgufType::uint32;
  std::int64_t integer = 0;
  std::uint64_t unsigned_integer = 0;  ///< uint64 values only
  double real = 0.0;
  std::string text;
  GgufType element_type = GgufType::uint8;  ///< arrays only
  std::vector<GgufValue> elements;          ///< arrays only

  static GgufValue of_uint32(std::uint32_t v);
  static GgufValue of_int32(std::int32_t v);
  static GgufValue of_float32(float v);
  static GgufValue of_string(std::string v);
  static GgufValue of_bool(bool v);
  static GgufValue of_array(GgufType element_type, std::vector<GgufValue> elements);
  bool operator==(const GgufValue&) const = default;
};

/// @ingroup ch08
/// One tensor: its name, ggml's dimensions (the row length first), its type, its bytes.
struct GgufTensor {
  std::string name;
  std::vector<std::uint64_t> dims;
  GgmlType type = GgmlType::f32;
  std::vector<std::uint8_t> data;
  bool operator==(const GgufTensor&) const = default;
};

/// @ingroup ch08
/// A whole file: metadata in order, tensors in order.
struct GgufFile {
  std::uint32_t version = 3;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensor> tensors;
  /// `general.alignment` when present, 32 otherwise.
  std::size_t alignment() const;
  bool operator==(const GgufFile&) const = default;
};

/// @ingroup ch08
/// The file's bytes: header, metadata, tensor infos, padding, data (each tensor padded to the
/// alignment with zero bytes, offsets in order). Errors: a tensor whose bytes do not match its
/// dimensions and type, a name of 64 bytes or more, more than 4 dimensions, an alignment that is
/// not a power of two.
std::vector<std::uint8_t> gguf_bytes(const GgufFile& file);

/// @ingroup ch08
/// Writes `gguf_bytes(file)` to `path` (an error naming the path when it cannot be written).
void write_gguf(const std::string& path, const GgufFile& file);

/// @ingroup ch08
/// Parses a GGUF file's bytes; `name` is what errors call it. Every failed check raises a
/// `tvlab::Error` with the byte offset: a bad magic, a version other than 2 or 3, a count, length
/// or size larger than what is left of the file, an unknown value or tensor type, a dimension of 0,
/// a row length that is not a multiple of the type's block, a misaligned offset, data outside the
/// file.
GgufFile parse_gguf(const std::vector<std::uint8_t>& bytes, const std::string& name = "GGUF data");

/// @ingroup ch08
/// Reads and parses the file at `path`.
GgufFile read_gguf(const std::string& path);

/// @ingroup ch08
/// A matrix as a 2-D tensor named `name` (dimensions [cols, rows]).
GgufTensor gguf_tensor(const std::string& name, const QuantizedMatrix& q);

/// @ingroup ch08
/// A float matrix as an F32 tensor named `name`.
GgufTensor gguf_tensor(const std::string& name, const Tensor2& x);

/// @ingroup ch08
/// The values a tensor stands for, as a matrix [rows, row length] (a 1-D tensor is one row; the
/// dimensions beyond the first are multiplied into the rows): F32 as stored, F16 converted, the
/// block types dequantized (`ref::dequantize`).
Tensor2 gguf_tensor_values(const GgufTensor& t);

/// @ingroup ch08
/// "uint32 = 32", "string = \"llama\"", "array of 3 string" ...: one line for a listing.
std::string describe(const GgufValue& value);

}  // namespace tvlab::ref

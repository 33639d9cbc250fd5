#include "tvlab/ref/gguf.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <type_traits>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/block_quant.hpp"

namespace tvlab::ref {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr std::size_t kDefaultAlignment = 32;
constexpr std::size_t kMaxName = 64;  // ggml's GGML_MAX_NAME, terminating zero included
constexpr std::size_t kMaxDims = 4;

bool known_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufType::float64); }

// Bytes of a scalar of type t (0 for strings and arrays, whose size is in the data).
std::size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::uint8: case GgufType::int8: case GgufType::boolean: return 1;
    case GgufType::uint16: case GgufType::int16: return 2;
    case GgufType::uint32: case GgufType::int32: case GgufType::float32: return 4;
    case GgufType::uint64: case GgufType::int64: case GgufType::float64: return 8;
    default: return 0;
  }
}

std::string value_type_name(GgufType t) {
  static const char* names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32", "float32",
                                "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto i = static_cast<std::uint32_t>(t);
  return i < 13 ? names[i] : "type " + std::to_string(i);
}

std::size_t pad_to(std::size_t n, std::size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// The byte size of a tensor of `dims` and `type`, or an error message when it has none.
std::string tensor_size(const std::vector<std::uint64_t>& dims, GgmlType type, std::uint64_t& size) {
  if (dims.empty() || dims.size() > kMaxDims) return "has " + std::to_string(dims.size()) + " dimensions (1 to 4)";
  std::uint64_t count = 1;
  for (std::uint64_t d : dims) {
    if (d == 0) return "has a dimension of 0";
    if (__builtin_mul_overflow(count, d, &count)) return "has more elements than 64 bits can count";
  }
  if (dims[0] % block_size(type) != 0)
    return "has a row length of " + std::to_string(dims[0]) + ", not a multiple of " + type_name(type) + "'s block of " +
           std::to_string(block_size(type));
  if (__builtin_mul_overflow(count / block_size(type), block_bytes(type), &size))
    return "has more bytes than 64 bits can count";
  return "";
}

// The unsigned integer of T's size: a value's bits, shifted byte by byte to or from the file.
template <class T>
using Bits = std::conditional_t<sizeof(T) == 1, std::uint8_t,
                                std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                                   std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;

// ------------------------------------------------------------------ writing

struct ByteWriter {
  std::vector<std::uint8_t> out;
  template <class T>
  void put(T value) {  // little-endian, on every host
    const auto bits = std::bit_cast<Bits<T>>(value);
    for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<std::uint8_t>(bits >> (8 * i)));
  }
  void put_string(const std::string& s) {
    put<std::uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void put_value(const GgufValue& v, GgufType type) {
    switch (type) {
      case GgufType::uint8: put<std::uint8_t>(static_cast<std::uint8_t>(v.integer)); break;
      case GgufType::int8: put<std::int8_t>(static_cast<std::int8_t>(v.integer)); break;
      case GgufType::uint16: put<std::uint16_t>(static_cast<std::uint16_t>(v.integer)); break;
      case GgufType::int16: put<std::int16_t>(static_cast<std::int16_t>(v.integer)); break;
      case GgufType::uint32: put<std::uint32_t>(static_cast<std::uint32_t>(v.integer)); break;
      case GgufType::int32: put<std::int32_t>(static_cast<std::int32_t>(v.integer)); break;
      case GgufType::float32: put<float>(static_cast<float>(v.real)); break;
      case GgufType::boolean: put<std::uint8_t>(v.integer != 0); break;
      case GgufType::string: put_string(v.text); break;
      case GgufType::uint64: put<std::uint64_t>(v.unsigned_integer); break;
      case GgufType::int64: put<std::int64_t>(v.integer); break;
      case GgufType::float64: put<double>(v.real); break;
      case GgufType::array:
        require(v.element_type != GgufType::array, "gguf_bytes", "an array of arrays cannot be written (ggml rejects it)");
        put<std::uint32_t>(static_cast<std::uint32_t>(v.element_type));
        put<std::uint64_t>(v.elements.size());
        for (const GgufValue& e : v.elements) put_value(e, v.element_type);
        break;
    }
  }
};

// ------------------------------------------------------------------ reading

class ByteReader {
 public:
  ByteReader(const std::vector<std::uint8_t>& bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  std::size_t offset() const { return at_; }
  std::size_t left() const { return bytes_.size() - at_; }

  template <class... Parts>
  [[noreturn]] void fail_at(std::size_t offset, const Parts&... parts) const {
    std::ostringstream where;
    where << name_ << ": at byte " << offset << " of " << bytes_.size() << ": ";
    tvlab::fail("read_gguf", where.str(), parts...);
  }

  template <class T>
  T get(const char* what) {
    if (left() < sizeof(T)) fail_at(at_, what, " needs ", sizeof(T), " bytes, the file ends after ", left());
    std::uint64_t bits = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<std::uint64_t>(bytes_[at_ + i]) << (8 * i);
    at_ += sizeof(T);
    return std::bit_cast<T>(static_cast<Bits<T>>(bits));
  }

  std::string get_string(const char* what) {
    const std::size_t start = at_;
    const auto length = get<std::uint64_t>(what);
    if (length > left()) fail_at(start, what, " has a length of ", length, " bytes, more than the ", left(), " left");
    std::string s(bytes_.begin() + static_cast<std::ptrdiff_t>(at_),
                  bytes_.begin() + static_cast<std::ptrdiff_t>(at_ + length));
    at_ += length;
    return s;
  }

  GgufValue get_value(GgufType type, const std::string& key) {
    GgufValue v;
    v.type = type;
    switch (type) {
      case GgufType::uint8: v.integer = get<std::uint8_t>("a uint8"); break;
      case GgufType::int8: v.integer = get<std::int8_t>("an int8"); break;
      case GgufType::uint16: v.integer = get<std::uint16_t>("a uint16"); break;
      case GgufType::int16: v.integer = get<std::int16_t>("an int16"); break;
      case GgufType::uint32: v.integer = get<std::uint32_t>("a uint32"); break;
      case GgufType::int32: v.integer = get<std::int32_t>("an int32"); break;
      case GgufType::float32: v.real = get<float>("a float32"); break;
      case GgufType::boolean: {
        const std::size_t at = at_;
        const auto b = get<std::uint8_t>("a bool");
        if (b > 1) fail_at(at, "the bool of \"", key, "\" is ", static_cast<int>(b), ", not 0 or 1");
        v.integer = b;
        break;
      }
      case GgufType::string: v.text = get_string("a string"); break;
      case GgufType::uint64: v.unsigned_integer = get<std::uint64_t>("a uint64"); break;
      case GgufType::int64: v.integer = get<std::int64_t>("an int64"); break;
      case GgufType::float64: v.real = get<double>("a float64"); break;
      case GgufType::array: {
        const std::size_t at = at_;
        const auto element = get<std::uint32_t>("an array's element type");
        if (!known_value_type(element) || element == static_cast<std::uint32_t>(GgufType::array))
          fail_at(at, "the array \"", key, "\" has element type ", element, " (0 to 12, not an array)");
        v.element_type = static_cast<GgufType>(element);
        const std::size_t count_at = at_;
        const auto count = get<std::uint64_t>("an array's length");
        // every element takes at least one byte (a string at least its 8-byte length)
        const std::size_t smallest = v.element_type == GgufType::string ? 8 : scalar_size(v.element_type);
        if (count > left() / smallest)
          fail_at(count_at, "the array \"", key, "\" has ", count, " elements of ", value_type_name(v.element_type),
                  ", more than the ", left(), " bytes left can hold");
        v.elements.reserve(count);
        for (std::uint64_t i = 0; i < count; ++i) v.elements.push_back(get_value(v.element_type, key));
        break;
      }
    }
    return v;
  }

 private:
  const std::vector<std::uint8_t>& bytes_;
  const std::string& name_;
  std::size_t at_ = 0;
};

}  // namespace

// ------------------------------------------------------------------ values

GgufValue GgufValue::of_uint32(std::uint32_t v) { return {.type = GgufType::uint32, .integer = v}; }
GgufValue GgufValue::of_int32(std::int32_t v) { return {.type = GgufType::int32, .integer = v}; }
GgufValue GgufValue::of_float32(float v) { return {.type = GgufType::float32, .real = v}; }
GgufValue GgufValue::of_string(std::string v) { return {.type = GgufType::string, .text = std::move(v)}; }
GgufValue GgufValue::of_bool(bool v) { return {.type = GgufType::boolean, .integer = v}; }
GgufValue GgufValue::of_array(GgufType element_type, std::vector<GgufValue> elements) {
  return {.type = GgufType::array, .element_type = element_type, .elements = std::move(elements)};
}

std::size_t GgufFile::alignment() const {
  for (const auto& [key, value] : metadata)
    if (key == "general.alignment" && value.type == GgufType::uint32) return static_cast<std::size_t>(value.integer);
  return kDefaultAlignment;
}

std::string describe(const GgufValue& v) {
  std::ostringstream out;
  switch (v.type) {
    case GgufType::string: out << "string = \"" << v.text << '"'; break;
    case GgufType::array: out << "array of " << v.elements.size() << ' ' << value_type_name(v.element_type); break;
    case GgufType::float32: case GgufType::float64: out << value_type_name(v.type) << " = " << v.real; break;
    case GgufType::uint64: out << "uint64 = " << v.unsigned_integer; break;
    case GgufType::boolean: out << "bool = " << (v.integer ? "true" : "false"); break;
    default: out << value_type_name(v.type) << " = " << v.integer; break;
  }
  return out.str();
}

// ------------------------------------------------------------------ the file

std::vector<std::uint8_t> gguf_bytes(const GgufFile& file) {
  const char* fn = "gguf_bytes";
  const std::size_t alignment = file.alignment();
  require(alignment > 0 && (alignment & (alignment - 1)) == 0, fn, "general.alignment (", alignment,
          ") must be a power of two");
  ByteWriter w;
  for (char c : kMagic) w.put<std::uint8_t>(static_cast<std::uint8_t>(c));
  w.put<std::uint32_t>(file.version);
  w.put<std::uint64_t>(file.tensors.size());
  w.put<std::uint64_t>(file.metadata.size());
  for (const auto& [key, value] : file.metadata) {
    w.put_string(key);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(value.type));
    w.put_value(value, value.type);
  }
  // tensor infos: offsets in order, each tensor's bytes padded to the alignment
  std::uint64_t offset = 0;
  for (const GgufTensor& t : file.tensors) {
    std::uint64_t size = 0;
    const std::string why = tensor_size(t.dims, t.type, size);
    require(why.empty(), fn, "tensor \"", t.name, "\" ", why);
    require(t.data.size() == size, fn, "tensor \"", t.name, "\" holds ", t.data.size(), " bytes, its dimensions and ",
            type_name(t.type), " need ", size);
    require(t.name.size() < kMaxName, fn, "tensor name \"", t.name, "\" has ", t.name.size(),
            " bytes; ggml allows at most ", kMaxName - 1);
    w.put_string(t.name);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(t.dims.size()));
    for (std::uint64_t d : t.dims) w.put<std::uint64_t>(d);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(t.type));
    w.put<std::uint64_t>(offset);
    offset += pad_to(t.data.size(), alignment);
  }
  w.out.resize(pad_to(w.out.size(), alignment), 0);
  for (const GgufTensor& t : file.tensors) {
    w.out.insert(w.out.end(), t.data.begin(), t.data.end());
    w.out.resize(pad_to(w.out.size(), alignment), 0);
  }
  return w.out;
}

void write_gguf(const std::string& path, const GgufFile& file) {
  const std::vector<std::uint8_t> bytes = gguf_bytes(file);
  std::ofstream out(path, std::ios::binary);
  require(static_cast<bool>(out), "write_gguf", "cannot open \"", path, "\" for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  require(static_cast<bool>(out), "write_gguf", "writing \"", path, "\" failed");
}

GgufFile parse_gguf(const std::vector<std::uint8_t>& bytes, const std::string& name) {
  ByteReader r(bytes, name);
  GgufFile file;
  if (bytes.size() < 4 || !std::equal(kMagic, kMagic + 4, bytes.begin()))
    r.fail_at(0, "the file does not start with the magic \"GGUF\" (bytes 47 47 55 46)");
  r.get<std::uint32_t>("the magic");
  const std::size_t version_at = r.offset();
  file.version = r.get<std::uint32_t>("the version");
  if (file.version != 2 && file.version != 3)
    r.fail_at(version_at, "version ", file.version, " (this reader knows GGUF 2 and 3)");
  const std::size_t counts_at = r.offset();
  const auto tensor_count = r.get<std::uint64_t>("the tensor count");
  const auto metadata_count = r.get<std::uint64_t>("the metadata count");
  // a metadata pair takes at least 13 bytes (key length, value type, one byte), a tensor info 32
  if (metadata_count > r.left() / 13)
    r.fail_at(counts_at + 8, "a metadata count of ", metadata_count, " cannot fit in the ", r.left(), " bytes left");
  if (tensor_count > r.left() / 32)
    r.fail_at(counts_at, "a tensor count of ", tensor_count, " cannot fit in the ", r.left(), " bytes left");
  for (std::uint64_t i = 0; i < metadata_count; ++i) {
    std::string key = r.get_string("a metadata key");
    const std::size_t type_at = r.offset();
    const auto type = r.get<std::uint32_t>("a value type");
    if (!known_value_type(type)) r.fail_at(type_at, "metadata \"", key, "\" has value type ", type, " (0 to 12)");
    GgufValue value = r.get_value(static_cast<GgufType>(type), key);
    if (key == "general.alignment") {
      const bool power_of_two = value.integer > 0 && (value.integer & (value.integer - 1)) == 0;
      if (value.type != GgufType::uint32 || !power_of_two)
        r.fail_at(type_at, "general.alignment must be a uint32 power of two, found ", describe(value));
    }
    file.metadata.emplace_back(std::move(key), std::move(value));
  }
  std::vector<std::uint64_t> offsets;
  std::vector<std::size_t> info_offsets;
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t;
    info_offsets.push_back(r.offset());
    t.name = r.get_string("a tensor name");
    const std::size_t dims_at = r.offset();
    const auto dim_count = r.get<std::uint32_t>("a dimension count");
    if (dim_count == 0 || dim_count > kMaxDims)
      r.fail_at(dims_at, "tensor \"", t.name, "\" has ", dim_count, " dimensions (1 to 4)");
    for (std::uint32_t d = 0; d < dim_count; ++d) t.dims.push_back(r.get<std::uint64_t>("a dimension"));
    const std::size_t type_at = r.offset();
    const auto type = r.get<std::uint32_t>("a tensor type");
    if (!is_known_type(type))
      r.fail_at(type_at, "tensor \"", t.name, "\" has ggml type ", type,
                ", which this reader does not know (F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8)");
    t.type = static_cast<GgmlType>(type);
    std::uint64_t size = 0;
    const std::string why = tensor_size(t.dims, t.type, size);
    if (!why.empty()) r.fail_at(dims_at, "tensor \"", t.name, "\" ", why);
    t.data.resize(static_cast<std::size_t>(std::min<std::uint64_t>(size, bytes.size())));
    offsets.push_back(r.get<std::uint64_t>("a tensor offset"));
    file.tensors.push_back(std::move(t));
  }
  const std::size_t alignment = file.alignment();
  const std::size_t data_start = pad_to(r.offset(), alignment);
  for (std::size_t i = 0; i < file.tensors.size(); ++i) {
    GgufTensor& t = file.tensors[i];
    std::uint64_t size = 0;
    tensor_size(t.dims, t.type, size);
    if (offsets[i] % alignment != 0)
      r.fail_at(info_offsets[i], "tensor \"", t.name, "\" starts at data offset ", offsets[i],
                ", not a multiple of the alignment ", alignment);
    if (data_start > bytes.size() || offsets[i] > bytes.size() - data_start || size > bytes.size() - data_start - offsets[i])
      r.fail_at(info_offsets[i], "tensor \"", t.name, "\" (", size, " bytes at data offset ", offsets[i],
                ") lies beyond the end of the file (the data starts at byte ", data_start, ")");
    const auto begin = bytes.begin() + static_cast<std::ptrdiff_t>(data_start + offsets[i]);
    t.data.assign(begin, begin + static_cast<std::ptrdiff_t>(size));
  }
  return file;
}

GgufFile read_gguf(const std::string& path) {
  // a device or a pipe could be endless (/dev/zero): only regular files are read
  std::error_code error;
  require(std::filesystem::is_regular_file(path, error), "read_gguf", "cannot open \"", path,
          "\": not a regular file");
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), "read_gguf", "cannot open \"", path, "\"");
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_gguf(bytes, path);
}

// ------------------------------------------------------------------ tensors and matrices

GgufTensor gguf_tensor(const std::string& name, const QuantizedMatrix& q) {
  validate_quantized("gguf_tensor", q);
  return {name, {q.cols, q.rows}, q.type, q.bytes};
}

GgufTensor gguf_tensor(const std::string& name, const Tensor2& x) {
  require_nonempty("gguf_tensor", "x", x);
  GgufTensor t{name, {x.shape()[1], x.shape()[0]}, GgmlType::f32, std::vector<std::uint8_t>(x.size() * 4)};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto bits = std::bit_cast<std::uint32_t>(x.data()[i]);
    for (int b = 0; b < 4; ++b) t.data[4 * i + b] = static_cast<std::uint8_t>(bits >> (8 * b));
  }
  return t;
}

Tensor2 gguf_tensor_values(const GgufTensor& t) {
  std::uint64_t size = 0;
  const std::string why = tensor_size(t.dims, t.type, size);
  require(why.empty(), "gguf_tensor_values", "tensor \"", t.name, "\" ", why);
  require(t.data.size() == size, "gguf_tensor_values", "tensor \"", t.name, "\" holds ", t.data.size(),
          " bytes, expected ", size);
  std::uint64_t rows = 1;
  for (std::size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
  const std::size_t cols = t.dims[0];
  if (t.type == GgmlType::f32 || t.type == GgmlType::f16) {
    Tensor2 y = Tensor2::from_shape({static_cast<std::size_t>(rows), cols});
    for (std::size_t i = 0; i < y.size(); ++i)
      if (t.type == GgmlType::f32) {
        std::uint32_t bits = 0;
        for (int b = 0; b < 4; ++b) bits |= static_cast<std::uint32_t>(t.data[4 * i + b]) << (8 * b);
        y.data()[i] = std::bit_cast<float>(bits);
      } else {
        y.data()[i] = read_fp16(t.data.data() + 2 * i);
      }
    return y;
  }
  return dequantize(QuantizedMatrix{t.type, static_cast<std::size_t>(rows), cols, t.data});
}

}  // namespace tvlab::ref

#include "npy_load.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab::cli {
namespace {

// "[2, 6, 4]"
std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// What the header of a .npy file says (format version 1.0, 2.0 or 3.0, as NumPy documents it:
// the magic "\x93NUMPY", two version bytes, the header's length, then a Python dict literal such
// as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 6, 4), }, then the raw values).
struct NpyHeader {
  std::size_t item_size = 0;  // 4: float32, 8: float64 (little-endian)
  std::vector<std::size_t> shape;
  std::uint64_t data_offset = 0;
};

// The text after `'key':` in the dict, spaces skipped ("" when the key is absent).
std::string value_of(const std::string& dict, const std::string& key) {
  const std::size_t at = dict.find("'" + key + "'");
  if (at == std::string::npos) return "";
  std::size_t i = dict.find(':', at);
  if (i == std::string::npos) return "";
  ++i;
  while (i < dict.size() && dict[i] == ' ') ++i;
  return dict.substr(i);
}

NpyHeader read_header(const std::string& path, std::ifstream& in, std::uint64_t file_size) {
  auto bad = [&path](const auto&... why) { fail("--load", path, " is not a .npy file: ", why...); };
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) bad("it does not start with \\x93NUMPY");
  const auto major = static_cast<unsigned char>(magic[6]);
  if (major < 1 || major > 3) bad("format version ", static_cast<int>(major), ".x, expected 1.0, 2.0 or 3.0");
  // Version 1 stores the header's length in 2 bytes, versions 2 and 3 in 4 (little-endian).
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  unsigned char length_le[4] = {0, 0, 0, 0};
  if (!in.read(reinterpret_cast<char*>(length_le), static_cast<std::streamsize>(length_bytes))) bad("its header is cut short");
  std::uint64_t header_length = 0;
  for (std::size_t b = length_bytes; b-- > 0;) header_length = header_length * 256 + length_le[b];
  const std::uint64_t offset = 8 + length_bytes + header_length;
  if (offset > file_size || header_length > (1u << 20)) bad("its header length (", header_length, ") is not plausible");
  std::string dict(static_cast<std::size_t>(header_length), '\0');
  if (!in.read(dict.data(), static_cast<std::streamsize>(header_length))) bad("its header is cut short");

  NpyHeader h;
  h.data_offset = offset;
  const std::string descr = value_of(dict, "descr");
  if (descr.rfind("'<f4'", 0) == 0) {
    h.item_size = 4;
  } else if (descr.rfind("'<f8'", 0) == 0) {
    h.item_size = 8;
  } else {
    const std::size_t end = descr.find_first_of(",}");
    fail("--load", path, " holds dtype ", descr.substr(0, std::min<std::size_t>(end, 20)),
         ", expected float32 ('<f4') or float64 ('<f8')");
  }
  if (value_of(dict, "fortran_order").rfind("False", 0) != 0)
    fail("--load", path, " is stored in Fortran order: save it in C order (numpy.ascontiguousarray)");
  // 'shape': (2, 6, 4) or (6,) or ()
  const std::string shape = value_of(dict, "shape");
  if (shape.empty() || shape[0] != '(') bad("its header has no shape");
  std::size_t i = 1;
  while (true) {
    while (i < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i >= shape.size()) bad("its shape is not closed");
    if (shape[i] == ')') break;
    std::uint64_t dim = 0;
    const std::size_t first = i;
    while (i < shape.size() && shape[i] >= '0' && shape[i] <= '9') {
      if (dim > (std::numeric_limits<std::uint64_t>::max() - 9) / 10) bad("a dimension of its shape is too large");
      dim = dim * 10 + static_cast<std::uint64_t>(shape[i++] - '0');
    }
    if (i == first) bad("its shape is not a tuple of whole numbers");
    if (h.shape.size() == 32) bad("its shape has more than 32 dimensions");
    h.shape.push_back(static_cast<std::size_t>(dim));
  }
  // The values must be exactly what the rest of the file holds (checked without overflow).
  std::uint64_t bytes = h.item_size;
  for (std::size_t dim : h.shape) {
    if (dim != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / dim) bad("its shape ", shape_text(h.shape), " is too large");
    bytes *= dim;
  }
  if (bytes != file_size - offset)
    fail("--load", path, " has ", file_size - offset, " bytes of values, but its shape ", shape_text(h.shape), " needs ",
         bytes);
  return h;
}

// Opens `path` (a regular file: a folder, a device or a pipe is refused before it is opened).
std::ifstream open_npy(const std::string& dir, const std::string& path, std::uint64_t& file_size) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) fail("--load", dir, " is not a folder (expected the folder --dump wrote)");
  const auto status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) fail("--load", path, " does not exist (expected the .npy file --dump writes)");
  if (!std::filesystem::is_regular_file(status)) fail("--load", path, " is not a regular file");
  file_size = std::filesystem::file_size(path, error);
  if (error) fail("--load", path, " cannot be read: ", error.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("--load", path, " cannot be opened");
  return in;
}

}  // namespace

std::string Load::path(const std::string& name) const { return (std::filesystem::path(dir_) / (name + ".npy")).string(); }

std::vector<std::size_t> Load::shape(const std::string& name, std::size_t rank, const std::string& meaning) const {
  const std::string file = path(name);
  std::uint64_t size = 0;
  std::ifstream in = open_npy(dir_, file, size);
  const NpyHeader h = read_header(file, in, size);
  if (h.shape.size() != rank)
    fail("--load", file, " has shape ", shape_text(h.shape), ", expected ", rank, " dimensions ", meaning);
  for (std::size_t dim : h.shape)
    if (dim == 0) fail("--load", file, " has shape ", shape_text(h.shape), ": every dimension of ", meaning, " must be positive");
  return h.shape;
}

std::vector<float> Load::values(const std::string& name, const std::vector<std::size_t>& expected,
                                const std::string& meaning) const {
  const std::string file = path(name);
  std::uint64_t size = 0;
  std::ifstream in = open_npy(dir_, file, size);
  const NpyHeader h = read_header(file, in, size);
  if (h.shape != expected)
    fail("--load", file, " has shape ", shape_text(h.shape), ", expected ", shape_text(expected), " ", meaning);
  std::size_t count = 1;
  for (std::size_t dim : h.shape) count *= dim;
  std::vector<float> out(count);
  auto check = [&](double value, std::size_t index) {
    // float64 beyond float's range would become infinite: refuse it as the non-finite value it becomes.
    if (!std::isfinite(value) || std::fabs(value) > std::numeric_limits<float>::max())
      fail("--load", file, " has a non-finite value (", value, (std::isfinite(value) ? " is beyond float32's range" : ""),
           ") at flat index ", index, ": the inputs must be finite");
  };
  in.seekg(static_cast<std::streamoff>(h.data_offset));
  // .npy stores little-endian values; this is a little-endian machine (x86-64, AArch64 Linux).
  if (h.item_size == 4) {
    if (!in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(count * 4))) fail("--load", file, " is cut short");
    for (std::size_t i = 0; i < count; ++i) check(out[i], i);
  } else {
    std::vector<double> wide(count);
    if (!in.read(reinterpret_cast<char*>(wide.data()), static_cast<std::streamsize>(count * 8))) fail("--load", file, " is cut short");
    for (std::size_t i = 0; i < count; ++i) {
      check(wide[i], i);
      out[i] = static_cast<float>(wide[i]);
    }
  }
  return out;
}

namespace {
template <class T>
T to_tensor(const std::vector<float>& values, const std::vector<std::size_t>& shape) {
  typename T::shape_type s;
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = shape[i];
  T t = T::from_shape(s);
  std::copy(values.begin(), values.end(), t.begin());
  return t;
}
}  // namespace

Tensor1 Load::tensor1(const std::string& name, const std::vector<std::size_t>& expected, const std::string& meaning) const {
  return to_tensor<Tensor1>(values(name, expected, meaning), expected);
}
Tensor2 Load::tensor2(const std::string& name, const std::vector<std::size_t>& expected, const std::string& meaning) const {
  return to_tensor<Tensor2>(values(name, expected, meaning), expected);
}
Tensor3 Load::tensor3(const std::string& name, const std::vector<std::size_t>& expected, const std::string& meaning) const {
  return to_tensor<Tensor3>(values(name, expected, meaning), expected);
}

int size_from_load(const StandardOptions& standard, const std::string& option, int option_value, std::size_t loaded,
                   const std::string& where) {
  if (loaded > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    fail(option, where, " is ", loaded, ", more than ", option, " can take");
  const int size = static_cast<int>(loaded);
  if (standard.given && standard.given(option) && option_value != size)
    fail(option, "(", option_value, ") disagrees with --load: ", where, " is ", size, " (give one of them)");
  return size;
}

AttentionSizes attention_sizes(const Load& load, const StandardOptions& standard, AttentionSizes given) {
  if (!load.enabled()) return given;
  const auto q_shape = load.shape("q", 3, "[heads, seq, head_dim]");
  const auto k_shape = load.shape("k", 3, "[heads, seq_k, head_dim]");
  AttentionSizes sizes;
  sizes.heads = size_from_load(standard, "--heads", given.heads, q_shape[0], "q.npy's dimension 0 (heads)");
  sizes.seq = size_from_load(standard, "--seq", given.seq, q_shape[1], "q.npy's dimension 1 (seq)");
  sizes.head_dim = size_from_load(standard, "--head-dim", given.head_dim, q_shape[2], "q.npy's dimension 2 (head_dim)");
  sizes.seq_k = size_from_load(standard, "--seq-k", given.seq_k, k_shape[1], "k.npy's dimension 1 (seq_k)");
  return sizes;
}

}  // namespace tvlab::cli

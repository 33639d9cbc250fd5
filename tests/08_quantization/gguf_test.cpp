// Chapter 08, GGUF version 3: a file written and read back is the same file; its bytes are laid
// out as the format says, field by field, checked here by hand; and a damaged file (cut short at
// every byte, or with one field made wrong) raises an error naming the byte, never a crash.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/block_quant.hpp"
#include "tvlab/ref/gguf.hpp"

namespace tvlab::ref {
namespace {

using tvlab::testing::throws_error_naming;

// Metadata of every value type and a tensor of every format (and an F32 one).
GgufFile sample_file() {
  GgufFile f;
  f.metadata = {
      {"general.architecture", GgufValue::of_string("llama")},
      {"general.alignment", GgufValue::of_uint32(64)},
      {"tvlab.uint8", {.type = GgufType::uint8, .integer = 200}},
      {"tvlab.int8", {.type = GgufType::int8, .integer = -100}},
      {"tvlab.uint16", {.type = GgufType::uint16, .integer = 60000}},
      {"tvlab.int16", {.type = GgufType::int16, .integer = -30000}},
      {"tvlab.int32", GgufValue::of_int32(-2000000000)},
      {"tvlab.float32", GgufValue::of_float32(0.25f)},
      {"tvlab.bool", GgufValue::of_bool(true)},
      {"tvlab.uint64", {.type = GgufType::uint64, .unsigned_integer = 18000000000000000000ull}},
      {"tvlab.int64", {.type = GgufType::int64, .integer = -9000000000000000000ll}},
      {"tvlab.float64", {.type = GgufType::float64, .real = 1.0 / 3.0}},
      {"tvlab.tokens", GgufValue::of_array(GgufType::string, {GgufValue::of_string("<s>"), GgufValue::of_string("a")})},
      {"tvlab.scores", GgufValue::of_array(GgufType::float32, {GgufValue::of_float32(-1.5f)})},
  };
  Rng rng(820);
  const Tensor2 w = rng.normal_matrix(3, 256);
  f.tensors.push_back(gguf_tensor("w.f32", w));
  for (GgmlType type : quantized_types()) f.tensors.push_back(gguf_tensor("w." + type_name(type), quantize(w, type)));
  return f;
}

TEST(Ch08Gguf, a_written_file_reads_back_the_same) {
  const GgufFile f = sample_file();
  const GgufFile back = parse_gguf(gguf_bytes(f));
  EXPECT_TRUE(back == f) << "a field changed in the round trip";
  EXPECT_EQ(back.alignment(), 64u);
  // the values the tensors stand for: the F32 one as written, the others dequantized
  const Tensor2 w = gguf_tensor_values(back.tensors[0]);
  EXPECT_EQ(w.shape()[0], 3u);
  EXPECT_EQ(w.shape()[1], 256u);
  for (std::size_t t = 1; t < back.tensors.size(); ++t) {
    const Tensor2 v = gguf_tensor_values(back.tensors[t]);
    EXPECT_TRUE(v == dequantize(quantize(w, back.tensors[t].type))) << back.tensors[t].name;
  }
}

std::uint64_t u64_at(const std::vector<std::uint8_t>& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(b[at + i]) << (8 * i);
  return v;
}

// The layout, by hand: "GGUF", version 3, 1 tensor, 1 metadata pair; the key "general.name" (length
// 12, then its bytes), type 8 (string), the string "tiny" (length 4, bytes); the tensor info "t"
// with 2 dimensions [32, 2], type 8 (Q8_0), offset 0; zero bytes up to 32; the 2 x 34 bytes of data,
// and zero bytes up to the next multiple of 32.
TEST(Ch08Gguf, the_bytes_are_laid_out_as_the_format_says) {
  GgufFile f;
  f.metadata = {{"general.name", GgufValue::of_string("tiny")}};
  Tensor2 w = xt::zeros<float>({std::size_t{2}, std::size_t{32}});
  w(0, 0) = 127.0f;
  f.tensors.push_back(gguf_tensor("t", quantize(w, GgmlType::q8_0)));
  const std::vector<std::uint8_t> b = gguf_bytes(f);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "GGUF");
  EXPECT_EQ(b[4], 3);
  EXPECT_EQ(u64_at(b, 8), 1u) << "tensor count";
  EXPECT_EQ(u64_at(b, 16), 1u) << "metadata count";
  EXPECT_EQ(u64_at(b, 24), 12u) << "key length";
  EXPECT_EQ(std::string(b.begin() + 32, b.begin() + 44), "general.name");
  EXPECT_EQ(b[44], 8) << "value type string";
  EXPECT_EQ(u64_at(b, 48), 4u);
  EXPECT_EQ(std::string(b.begin() + 56, b.begin() + 60), "tiny");
  EXPECT_EQ(u64_at(b, 60), 1u) << "tensor name length";
  EXPECT_EQ(b[68], 't');
  EXPECT_EQ(b[69], 2) << "dimension count";
  EXPECT_EQ(u64_at(b, 73), 32u) << "row length first";
  EXPECT_EQ(u64_at(b, 81), 2u);
  EXPECT_EQ(b[89], 8) << "ggml type Q8_0";
  EXPECT_EQ(u64_at(b, 93), 0u) << "offset";
  // the infos end at byte 101; the data starts at 128, the next multiple of 32
  for (std::size_t i = 101; i < 128; ++i) ASSERT_EQ(b[i], 0) << "padding byte " << i;
  EXPECT_EQ(b[128], 0x00);
  EXPECT_EQ(b[129], 0x3C) << "fp16 1.0, d = 127 / 127";
  EXPECT_EQ(b[130], 127);
  EXPECT_EQ(b.size(), 128u + 96u) << "68 bytes of data padded to 96";
}

// Cut short anywhere, the file is refused with the byte where it ends; never a crash or a silent
// partial file. (The last padding bytes after the data are not read, so cuts there would parse.)
TEST(Ch08Gguf, a_file_cut_short_anywhere_is_refused) {
  const std::vector<std::uint8_t> b = gguf_bytes(sample_file());
  const GgufFile f = sample_file();
  const std::size_t data_end = b.size() - (b.size() % 64 == 0 ? 64 - f.tensors.back().data.size() % 64 : 0);
  for (std::size_t n = 0; n < b.size(); ++n) {
    const std::vector<std::uint8_t> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    if (n >= data_end) continue;
    EXPECT_TRUE(throws_error_naming([&] { parse_gguf(cut, "cut.gguf"); }, {"read_gguf", "cut.gguf", "at byte"}))
        << "cut after " << n << " of " << b.size() << " bytes";
  }
}

// Offsets of fields in the tiny file of the layout test.
std::vector<std::uint8_t> tiny_bytes() {
  GgufFile f;
  f.metadata = {{"general.name", GgufValue::of_string("tiny")}};
  f.tensors.push_back(gguf_tensor("t", quantize(xt::ones<float>({std::size_t{2}, std::size_t{32}}), GgmlType::q8_0)));
  return gguf_bytes(f);
}

void put_u64(std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

TEST(Ch08Gguf, a_damaged_field_is_named_with_its_byte) {
  auto expect_refused = [](std::vector<std::uint8_t> b, const std::vector<std::string>& needles) {
    std::vector<std::string> all = needles;
    all.push_back("read_gguf");
    EXPECT_TRUE(throws_error_naming([&] { parse_gguf(b, "bad.gguf"); }, all));
  };
  std::vector<std::uint8_t> b = tiny_bytes();
  b[0] = 'X';
  expect_refused(b, {"at byte 0", "magic"});
  b = tiny_bytes();
  b[4] = 1;
  expect_refused(b, {"at byte 4", "version 1"});
  b = tiny_bytes();
  put_u64(b, 8, 1ull << 40);
  expect_refused(b, {"at byte 8", "tensor count of 1099511627776"});
  b = tiny_bytes();
  put_u64(b, 24, 1ull << 50);
  expect_refused(b, {"at byte 24", "length of 1125899906842624 bytes"});
  b = tiny_bytes();
  b[44] = 13;
  expect_refused(b, {"at byte 44", "value type 13"});
  b = tiny_bytes();
  b[69] = 5;
  expect_refused(b, {"at byte 69", "5 dimensions"});
  b = tiny_bytes();
  put_u64(b, 73, 48);
  expect_refused(b, {"at byte 69", "row length of 48", "block of 32"});
  b = tiny_bytes();
  put_u64(b, 81, 0);
  expect_refused(b, {"at byte 69", "dimension of 0"});
  b = tiny_bytes();
  b[89] = 99;
  expect_refused(b, {"at byte 89", "ggml type 99"});
  b = tiny_bytes();
  b[89] = 4;  // Q4_2, removed from ggml
  expect_refused(b, {"at byte 89", "ggml type 4"});
  b = tiny_bytes();
  put_u64(b, 93, 16);
  expect_refused(b, {"at byte 60", "data offset 16", "alignment 32"});
  b = tiny_bytes();
  put_u64(b, 93, 1ull << 62);
  expect_refused(b, {"at byte 60", "beyond the end of the file"});
}

TEST(Ch08Gguf, what_cannot_be_written_is_named) {
  GgufFile f;
  f.tensors.push_back(gguf_tensor("t", quantize(xt::ones<float>({std::size_t{1}, std::size_t{32}}), GgmlType::q4_0)));
  f.tensors[0].data.pop_back();
  EXPECT_TRUE(throws_error_naming([&] { gguf_bytes(f); }, {"gguf_bytes", "tensor \"t\"", "holds 17 bytes", "need 18"}));
  f.tensors[0].data.push_back(0);
  f.tensors[0].name = std::string(64, 'n');
  EXPECT_TRUE(throws_error_naming([&] { gguf_bytes(f); }, {"gguf_bytes", "64 bytes", "at most 63"}));
  f.tensors[0].name = "t";
  f.metadata = {{"general.alignment", GgufValue::of_uint32(48)}};
  EXPECT_TRUE(throws_error_naming([&] { gguf_bytes(f); }, {"gguf_bytes", "general.alignment (48)"}));
  EXPECT_TRUE(throws_error_naming([&] { read_gguf("/nonexistent/x.gguf"); }, {"read_gguf", "cannot open"}));
}

}  // namespace
}  // namespace tvlab::ref

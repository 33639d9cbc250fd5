// Chapter 08, dequantization over every backend that provides it (the CUDA kernels among them,
// skipped without a device): the reference's floats, bit for bit, for every block format, from the
// reference's bytes of the hostile weights (outliers, ties, zero and constant blocks).

#include <gtest/gtest.h>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/block_quant.hpp"

namespace tvlab::quant {
namespace {

class Dequantize : public ::testing::TestWithParam<std::tuple<Backend, GgmlType>> {};

TEST_P(Dequantize, floats_match_the_reference_bit_for_bit) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(890);
  Tensor2 x = rng.normal_matrix(7, 512);
  for (auto& v : x)
    if (rng.uniform() < 0.02) v *= 20.0f;
  for (std::size_t c = 0; c < 32; ++c) x(0, c) = 0.0f, x(1, c) = 3.0f;  // a zero and a constant block
  const QuantizedMatrix q = ref::quantize(x, type);
  const Tensor2 got = backend.dequantize(q), expected = ref::dequantize(q);
  ASSERT_EQ(got.shape(), expected.shape());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got.data()[i], expected.data()[i]) << backend.name << ", " << type << ": element " << i
                                                 << " (a fused multiply-add in d q + m changes the last bit)";
}

INSTANTIATE_TEST_SUITE_P(
    Ch08, Dequantize,
    ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::dequantize)),
                       ::testing::ValuesIn(quantized_types())),
    [](const ::testing::TestParamInfo<std::tuple<Backend, GgmlType>>& info) {
      return std::get<0>(info.param).name + "_" + type_name(std::get<1>(info.param));
    });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Dequantize);

}  // namespace
}  // namespace tvlab::quant

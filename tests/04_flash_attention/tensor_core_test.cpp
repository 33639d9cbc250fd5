// Chapter 04, 16-bit inputs (fp16, bf16), as tensor cores multiply them: the reference's
// emulation against an independent whole-row oracle and FlashAttention's accuracy rule, the
// bad-input checks, and the CUDA tensor-core kernel (tests named cuda_*, skipped without a
// device) against the emulation and the rule.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/testing.hpp"
#include "flash_case.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/flash_attention.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/flash_attention.hpp"
#include "tvlab/ref/flash_attention.hpp"

namespace tvlab::ch04 {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

// A format and its unit roundoff u = 2^-(mantissa bits + 1): rounding to nearest moves x by at
// most u |x|, and one step of the grid (an ulp) is at most 2u |x|.
struct Format {
  FlashInputs inputs;
  double unit_roundoff;
};
const Format kFormats[] = {{FlashInputs::fp16, 0x1p-11}, {FlashInputs::bf16, 0x1p-8}};

std::string name_of(const Format& f) { return to_string(f.inputs); }

// Attention in double on the 16-bit values of q, k and v, one whole row at a time. With
// `naive = false`: S exact, P~ = e^{S - rowmax} rounded to the format, O = sum_j P~_j v_j / l with
// l = sum_j e^{S_j - rowmax} unrounded. With one key tile the tiled algorithm's running maximum is
// the row maximum, so this is exactly what the emulation computes, by a different route.
// With `naive = true`: attention as a framework runs it on 16-bit tensors, every intermediate
// stored in the format: S rounded, the softmax P rounded, O = P V rounded. That is the "naive
// implementation in the same precision" of FlashAttention's accuracy rule.
DTensor3 attention_on_16_bit_values(const Tensor3& q, const Tensor3& k, const Tensor3& v, FlashInputs inputs,
                                    bool causal, bool naive) {
  const std::size_t heads = q.shape()[0], nq = q.shape()[1], d = q.shape()[2], nk = k.shape()[1], dv = v.shape()[2];
  auto r = [inputs](double x) { return static_cast<double>(round_to_inputs(static_cast<float>(x), inputs)); };
  DTensor3 out = xt::zeros<double>({heads, nq, dv});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < nq; ++i) {
      const std::size_t visible = causal ? i + (nk - nq) + 1 : nk;
      std::vector<double> s(visible);
      double m = -std::numeric_limits<double>::infinity(), l = 0;
      for (std::size_t j = 0; j < visible; ++j) {
        double dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += r(q(h, i, c)) * r(k(h, j, c));
        s[j] = dot / std::sqrt(static_cast<double>(d));
        if (naive) s[j] = r(s[j]);
        m = std::max(m, s[j]);
      }
      for (double& x : s) l += (x = std::exp(x - m));
      for (std::size_t j = 0; j < visible; ++j) {
        const double p = naive ? r(s[j] / l) : r(s[j]) / l;
        for (std::size_t c = 0; c < dv; ++c) out(h, i, c) += p * r(v(h, j, c));
      }
      if (naive)
        for (std::size_t c = 0; c < dv; ++c) out(h, i, c) = r(out(h, i, c));
    }
  return out;
}

// The largest |a - b|; infinity when a holds a NaN (std::max would silently drop it).
double max_abs_error(const Tensor3& a, const DTensor3& b) {
  double worst = 0;
  for (std::size_t t = 0; t < a.size(); ++t) {
    const double e = std::fabs(a.data()[t] - b.data()[t]);
    if (std::isnan(e)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, e);
  }
  return worst;
}

struct Inputs {
  Tensor3 q, k, v;
};

Inputs random_inputs(std::uint64_t seed, std::size_t heads, std::size_t nq, std::size_t nk, std::size_t d,
                     std::size_t dv) {
  Rng rng(seed);
  Inputs in{rng.normal_tensor(heads, nq, d), rng.normal_tensor(heads, nk, d), rng.normal_tensor(heads, nk, dv)};
  return in;
}

// ------------------------------------------------------------------------- the emulation (CPU)

TEST(Ch04SixteenBitInputs, emulation_with_one_key_tile_equals_the_whole_row_oracle) {
  const Inputs in = random_inputs(31, 2, 40, 70, 24, 20);
  for (const Format& f : kFormats)
    for (const bool causal : {false, true}) {
      FlashConfig cfg;
      cfg.inputs = f.inputs;
      cfg.mask.causal = causal;
      cfg.block_q = 16;
      cfg.block_k = 128;  // one key tile holds all 70 keys
      // Both sides compute in double on the same 16-bit values; they differ by the order of the
      // sums and the final rounding to float: 1e-6 leaves room for both.
      EXPECT_TRUE(matches(ref::flash_attention_forward(in.q, in.k, in.v, cfg).out,
                          attention_on_16_bit_values(in.q, in.k, in.v, f.inputs, causal, /*naive=*/false), {1e-6, 1e-6},
                          {"ref flash, " + name_of(f) + (causal ? ", causal" : ""), {"h", "i", "d"}, 31, "",
                           "round Q, K, V and the weights P~ to the format; keep l from the unrounded weights"}));
    }
}

TEST(Ch04SixteenBitInputs, emulation_keeps_flash_attentions_accuracy_rule_and_its_error_is_the_formats) {
  const Inputs in = random_inputs(32, 2, 256, 256, 64, 64);
  const DTensor3 exact = testing::sdpa_oracle(in.q, in.k, in.v, {});
  double error_of[2] = {0, 0};
  for (std::size_t f = 0; f < 2; ++f) {
    FlashConfig cfg;
    cfg.inputs = kFormats[f].inputs;
    cfg.block_q = cfg.block_k = 64;  // four key tiles: P~ is rounded relative to a running maximum
    const double flash = max_abs_error(ref::flash_attention_forward(in.q, in.k, in.v, cfg).out, exact);
    Tensor3 naive_out = Tensor3::from_shape(in.q.shape());
    const DTensor3 naive_d = attention_on_16_bit_values(in.q, in.k, in.v, kFormats[f].inputs, false, /*naive=*/true);
    std::copy(naive_d.begin(), naive_d.end(), naive_out.begin());
    const double naive = max_abs_error(naive_out, exact);
    // FlashAttention's rule: at most 2x the naive error in the same precision, plus a small floor.
    EXPECT_LE(flash, 2 * naive + 1e-6) << name_of(kFormats[f]) << ": flash " << flash << ", naive " << naive;
    // The rounding of the inputs alone moves each score by about u sum_c |q_c k_c| / sqrt(d): the
    // error must be of the format's size (between u/100 and 100 u with |v| <= 5), not float's.
    const double u = kFormats[f].unit_roundoff;
    EXPECT_GT(flash, u / 100) << name_of(kFormats[f]) << " error " << flash << " is too small: were the inputs rounded?";
    EXPECT_LT(flash, 100 * u) << name_of(kFormats[f]) << " error " << flash;
    RecordProperty("max_error_" + name_of(kFormats[f]), std::to_string(flash));
    error_of[f] = flash;
  }
  // bf16 keeps 3 fewer mantissa bits than fp16: its error is about 8 times larger.
  EXPECT_GT(error_of[1], 4 * error_of[0]) << "fp16 " << error_of[0] << ", bf16 " << error_of[1];
}

TEST(Ch04SixteenBitInputs, the_bits_a_tensor_core_reads_are_the_values_the_emulation_uses) {
  const Tensor3 x = Rng(34).normal_tensor(2, 5, 7, 0.0, 100.0);
  const std::vector<std::uint16_t> half = to_16_bit_inputs(x, FlashInputs::fp16), brain = to_16_bit_inputs(x, FlashInputs::bf16);
  ASSERT_EQ(half.size(), x.size());
  ASSERT_EQ(brain.size(), x.size());
  for (std::size_t t = 0; t < x.size(); ++t) {
    EXPECT_EQ(fp16_bits_to_float(half[t]), round_to_inputs(x.data()[t], FlashInputs::fp16)) << "element " << t;
    EXPECT_EQ(bf16_bits_to_float(brain[t]), round_to_inputs(x.data()[t], FlashInputs::bf16)) << "element " << t;
  }
  EXPECT_TRUE(throws_error_naming([&] { to_16_bit_inputs(x, FlashInputs::fp32); }, {"to_16_bit_inputs", "inputs"}));
}

TEST(Ch04SixteenBitInputs, rejects_bad_input_naming_the_parameter) {
  Tensor3 x = xt::ones<float>({1, 4, 8});
  FlashConfig cfg;
  cfg.inputs = FlashInputs::fp16;
  // fp16 stops at 65504; bf16 has float's exponent range.
  Tensor3 large = x;
  large(0, 1, 2) = 70000.0f;
  EXPECT_TRUE(throws_error_naming([&] { ref::flash_attention_forward(large, x, x, cfg); }, {"q", "65504"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::flash_attention_forward(x, x, large, cfg); }, {"v", "65504"}));
  cfg.inputs = FlashInputs::bf16;
  EXPECT_NO_THROW(ref::flash_attention_forward(x, x, large, cfg));
  cfg.fp8 = Fp8Scaling::per_tensor;
  EXPECT_TRUE(throws_error_naming([&] { ref::flash_attention_forward(x, x, x, cfg); }, {"cfg.fp8", "cfg.inputs"}));
  cfg = {};
  cfg.inputs = static_cast<FlashInputs>(7);
  EXPECT_TRUE(throws_error_naming([&] { ref::flash_attention_forward(x, x, x, cfg); }, {"cfg.inputs"}));
  // The backward pass and the fp32 backends take fp32 only.
  cfg.inputs = FlashInputs::bf16;
  const FlashOutput fwd = ref::flash_attention_forward(x, x, x, {});
  EXPECT_TRUE(throws_error_naming([&] { ref::flash_attention_backward(x, x, x, fwd.out, fwd.lse, x, cfg); },
                                  {"flash_attention_backward", "cfg.inputs"}));
  EXPECT_TRUE(throws_error_naming([&] { opt::flash_attention_backward(x, x, x, fwd.out, fwd.lse, x, cfg); },
                                  {"cfg.inputs"}));
  // The tensor-core kernel checks its arguments before it touches a device.
  cfg = {};
  EXPECT_TRUE(throws_error_naming([&] { cuda::flash_attention_forward_tensor_core(x, x, x, cfg); },
                                  {"flash_attention_forward_tensor_core", "cfg.inputs", "fp16 or bf16"}));
  cfg.inputs = FlashInputs::fp16;
  cfg.block_q = 40;
  EXPECT_TRUE(throws_error_naming([&] { cuda::flash_attention_forward_tensor_core(x, x, x, cfg); }, {"block_q", "16"}));
  cfg.block_q = 256;
  EXPECT_TRUE(throws_error_naming([&] { cuda::flash_attention_forward_tensor_core(x, x, x, cfg); }, {"block_q", "128"}));
  cfg.block_q = 64;
  cfg.block_k = 24;
  EXPECT_TRUE(throws_error_naming([&] { cuda::flash_attention_forward_tensor_core(x, x, x, cfg); }, {"block_k", "16"}));
  cfg.block_k = 64;
  EXPECT_TRUE(throws_error_naming([&] { cuda::flash_attention_forward_tensor_core(large, x, x, cfg); }, {"q", "65504"}));
}

// ------------------------------------------------------------------- the tensor-core kernel (GPU)

// Square and causal; queries that are the last 100 of 300 keys with head dimensions that need
// padding to 16; head_dim 256 with tiles the kernel must shrink to fit shared memory; more queries
// than keys; a single token.
const FlashCase kFlashCases[] = {
    {"n 128, d 64, causal", 1, 128, 128, 64, 64, true, 64, 64},
    {"100 queries over 300 keys, d 40, d_v 24, causal", 2, 100, 300, 40, 24, true, 64, 32},
    {"n 77, d 256, tiles of 128 x 128 asked (shrunk to fit)", 1, 77, 77, 256, 256, false, 128, 128},
    {"200 queries over 50 keys, d 80, d_v 72", 2, 200, 50, 80, 72, false, 32, 16},
    {"one token, causal", 1, 1, 1, 8, 8, true, 128, 128},
};

TEST(Ch04SixteenBitInputs, cuda_tensor_core_kernel_computes_what_the_reference_emulates) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  for (const Format& f : kFormats)
    for (const FlashCase& c : kFlashCases) {
      const Inputs in = random_inputs(40 + c.seq_k, c.heads, c.seq_q, c.seq_k, c.head_dim, c.head_dim_v);
      FlashConfig cfg;
      cfg.inputs = f.inputs;
      cfg.mask.causal = c.causal;
      cfg.block_q = c.block_q;
      cfg.block_k = c.block_k;
      const FlashOutput got = cuda::flash_attention_forward_tensor_core(in.q, in.k, in.v, cfg);
      const FlashOutput emulated = ref::flash_attention_forward(in.q, in.k, in.v, cfg);
      // Tolerance. Both round every weight to the format, each within u of its exact value, so
      // two roundings of a weight differ by at most 2u p_j (however the tiles fall): at most
      // 2u max|v| in O. fp16 weights below 2^-14 are subnormal, spaced 2^-24 apart: n_k 2^-24
      // max|v| more. The kernel's fp32 scores add chapter 00's float term rtol max|v| (2M + 1).
      AttentionConfig same;
      same.mask.causal = c.causal;
      const double rtol = tvlab::testing::reduction_rtol(std::max(c.head_dim, c.seq_k));
      const double vmax = xt::amax(xt::abs(in.v))();
      const double magnitude = testing::score_magnitude(in.q, in.k, same);
      const double atol = vmax * (2 * f.unit_roundoff + static_cast<double>(c.seq_k) * 0x1p-24 + rtol * (2 * magnitude + 1));
      const std::string what = "cuda tensor-core flash, " + name_of(f) + ", " + c.label;
      EXPECT_TRUE(matches(got.out, xt::eval(xt::cast<double>(emulated.out)), {atol, rtol},
                          {what, {"h", "i", "d"}, 40 + c.seq_k, "",
                           "check the causal mask and the padding of the last key tile: masked scores must be -inf"}));
      // L = m + ln l uses the unrounded weights on both sides: only the fp32 scores and the fast
      // exponential (2 + 1.16 |x| ulp at e^x, so its error grows with |S - m| like the scores') separate them.
      EXPECT_TRUE(matches(got.lse, xt::eval(xt::cast<double>(emulated.lse)), {rtol * (magnitude + 1), 0.0},
                          {"log-sum-exp, " + what, {"h", "i"}, 40 + c.seq_k, "", "L = m + ln(l), not ln(l) alone"}));
    }
}

TEST(Ch04SixteenBitInputs, cuda_tensor_core_kernel_keeps_flash_attentions_accuracy_rule) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  const Inputs in = random_inputs(33, 4, 512, 512, 128, 128);
  for (const Format& f : kFormats)
    for (const bool causal : {false, true}) {
      AttentionConfig same;
      same.mask.causal = causal;
      const DTensor3 exact = testing::sdpa_oracle(in.q, in.k, in.v, same);
      FlashConfig cfg;
      cfg.inputs = f.inputs;
      cfg.mask.causal = causal;
      const double flash = max_abs_error(cuda::flash_attention_forward_tensor_core(in.q, in.k, in.v, cfg).out, exact);
      Tensor3 naive_out = Tensor3::from_shape(in.q.shape());
      const DTensor3 naive_d = attention_on_16_bit_values(in.q, in.k, in.v, f.inputs, causal, /*naive=*/true);
      std::copy(naive_d.begin(), naive_d.end(), naive_out.begin());
      const double naive = max_abs_error(naive_out, exact);
      EXPECT_LE(flash, 2 * naive + 1e-6) << name_of(f) << (causal ? ", causal" : "") << ": tensor-core flash " << flash
                                         << ", naive " << naive;
      // Not float-sized either: the inputs were rounded (as in the emulation test).
      EXPECT_GT(flash, f.unit_roundoff / 100) << name_of(f) << ": error " << flash << " is too small for the format";
      RecordProperty("max_error_" + name_of(f) + (causal ? "_causal" : ""), std::to_string(flash));
    }
}

TEST(Ch04SixteenBitInputs, cuda_tensor_core_kernel_skips_the_tiles_above_the_diagonal) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  Rng rng(9);
  const Tensor3 x = rng.normal_tensor(1, 256, 16);
  FlashConfig cfg;
  cfg.inputs = FlashInputs::bf16;
  cfg.block_q = cfg.block_k = 64;
  cfg.mask.causal = true;
  // 4 x 4 tiles: query tile t sees key tiles 0 .. t, so 4 + 3 + 2 + 1 = 10 are computed, 6 skipped.
  const FlashOutput causal = cuda::flash_attention_forward_tensor_core(x, x, x, cfg);
  EXPECT_EQ(causal.tiles_computed, 10U);
  EXPECT_EQ(causal.tiles_skipped, 6U);
  // 100 queries over 300 keys, key tiles of 32: query tile 0 sees keys up to 263, tiles 0 .. 8 of 10.
  const Tensor3 q = rng.normal_tensor(1, 100, 16), k = rng.normal_tensor(1, 300, 16);
  cfg.block_k = 32;
  const FlashOutput shifted = cuda::flash_attention_forward_tensor_core(q, k, k, cfg);
  EXPECT_EQ(shifted.tiles_computed, 19U);
  EXPECT_EQ(shifted.tiles_skipped, 1U);
}

}  // namespace
}  // namespace tvlab::ch04

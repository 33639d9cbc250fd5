// `tvlab 01_normalization` (alias `tvlab norm`): LayerNorm and RMSNorm step by step, the
// activations, the FFN variants and their widths, and Post-LN vs Pre-LN with depth.

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "../common/svg.hpp"
#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/npy_load.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/analysis/attention_cost.hpp"
#include "tvlab/analysis/dying_units.hpp"
#include "tvlab/analysis/ffn_cost.hpp"
#include "tvlab/analysis/norm_precision.hpp"
#include "tvlab/analysis/residual_stack.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/cuda/activations.hpp"
#include "tvlab/cuda/ffn.hpp"
#include "tvlab/cuda/normalization.hpp"
#include "tvlab/opt/activations.hpp"
#include "tvlab/opt/ffn.hpp"
#include "tvlab/opt/normalization.hpp"
#include "tvlab/ref/activations.hpp"
#include "tvlab/ref/ffn.hpp"
#include "tvlab/ref/normalization.hpp"

namespace tvlab::cli {
namespace {

using analysis::FfnKind;

struct Options : StandardOptions {
  std::string svg;
  int tokens = 4, d_model = 8, d_ff = 0;
  double eps = 1e-5;
};

SwigluWeights random_swiglu(Rng& rng, std::size_t d, std::size_t d_ff) {
  const double s1 = 1 / std::sqrt(static_cast<double>(d)), s3 = 1 / std::sqrt(static_cast<double>(d_ff));
  return {rng.normal_matrix(d, d_ff, 0, s1), rng.normal_matrix(d, d_ff, 0, s1), rng.normal_matrix(d_ff, d, 0, s3)};
}

// ------------------------------------------------------------------------------ the documents

// RMS of RMSNorm's output for the tiny row [1e-3, -2e-3, 3e-3, 5e-4] with eps = 1e-5.
double rms_after_rms_norm_tiny_row() {
  const Tensor2 x = {{1e-3f, -2e-3f, 3e-3f, 5e-4f}};
  const Tensor2 y = ref::rms_norm(x, xt::ones<float>({4}), 1e-5);
  double ms = 0.0;
  for (float v : y) ms += static_cast<double>(v) * v / 4;
  return std::sqrt(ms);
}

std::vector<DocumentCheck> document_checks() {
  std::vector<DocumentCheck> c;
  c.push_back(check_number("000 L233", "GPT-3 d_ff / d_model", "4", 4, 1, 49152.0 / 12288, fixed(49152.0 / 12288, 2)));
  const double per_layer = analysis::ffn_params(FfnKind::gelu, 12288, 49152);
  c.push_back(check_number("000 L233", "GPT-3 FFN parameters per layer, 2 d d_ff", "about 1.2B", 1.2, 0.1, per_layer / 1e9,
                           fixed(per_layer / 1e9, 3) + "B"));
  c.push_back(check_number("000 L233", "GPT-3 FFN parameters, 96 layers", "about 115B", 115, 1, 96 * per_layer / 1e9,
                           fixed(96 * per_layer / 1e9, 2) + "B"));
  const double macs = 2048 * analysis::ffn_macs_per_token(FfnKind::gelu, 12288, 49152);
  c.push_back(check_number("000 L235", "GPT-3 FFN compute per layer, n = 2048", "2.5e12 FLOPs", 2.5e12, 0.1e12, 2 * macs,
                           sci(2 * macs) + " FLOPs (" + sci(macs) + " MACs)"));
  c.push_back(check_number("000 L398", "SwiGLU parameters at the same d_ff (3 matrices vs 2)", "+50%", 50, 1,
                           100 * (analysis::ffn_params(FfnKind::swiglu, 4096, 16384) /
                                      analysis::ffn_params(FfnKind::relu, 4096, 16384) -
                                  1),
                           "+50%"));
  const double equal = 3 * 4096 * analysis::swiglu_equal_params_width(4096) / analysis::ffn_params(FfnKind::relu, 4096, 4 * 4096);
  c.push_back(check_number("000 L398", "SwiGLU at d_ff = 8/3 d vs a 4d FFN: parameter ratio", "unchanged", 1, 0.001, equal,
                           fixed(equal, 4)));
  c.push_back(check_number("003 §5.3", "SwiGLU width factor 8/3", "about 2.67", 2.67, 0.01,
                           analysis::swiglu_equal_params_width(3) / 3, fixed(analysis::swiglu_equal_params_width(3) / 3, 4)));
  // LayerNorm: add, subtract, square, add, two multiplies, add (a second subtract of the mean if
  // x - mean is not kept); RMSNorm: square, add, two multiplies.
  c.push_back(check_number("000 L379", "arithmetic per element: LayerNorm 7 (2 reductions), RMSNorm 4 (1 reduction)",
                           "10-15% less compute", 12.5, 5, 100.0 * (7 - 4) / 7,
                           "43% fewer operations, 50% if x - mean is computed twice (time: see bench)"));
  c.push_back({"000 L371", "LayerNorm's most compute-heavy step (operations per element, of 7)",
               "mean-centring (a sum and a subtraction)",
               "variance 2 and scale/shift 2; mean 1 + centring 1 = 2 (a tie at best)", false});
  {
    // The stability claim, at mean/spread = 1e4 (rows of norm_precision_markdown).
    Rng rng(11);
    const Tensor2 x = rng.normal_matrix(16, 1024, 1e4, 1.0);
    const double ln = analysis::normwise_relative_error(analysis::layer_norm_float32(x, 1e-5), analysis::layer_norm_exact(x, 1e-5));
    const double rms = analysis::normwise_relative_error(analysis::rms_norm_float32(x, 1e-5), analysis::rms_norm_exact(x, 1e-5));
    const Tensor1 gamma = xt::ones<float>({std::size_t{1024}}), beta = xt::zeros<float>({std::size_t{1024}});
    const double accurate = analysis::normwise_relative_error(reference_backend(ch01::backends()).layer_norm(x, gamma, beta, 1e-5),
                                                              analysis::layer_norm_exact(x, 1e-5));
    c.push_back({"000 L379", "float32 error relative to the output at mean/spread 1e4 (d = 1024)",
                 "RMSNorm is numerically more stable",
                 "it depends: textbook LayerNorm " + sci(ln, 2) + ", RMSNorm " + sci(rms, 2) + ", ref LayerNorm " +
                     (accurate < 4 * 5.96e-8 ? std::string("< 4u") : sci(accurate, 2)),
                 false});
  }
  const double rms_tiny = rms_after_rms_norm_tiny_row();
  c.push_back(check_number("000 L377", "RMS of RMSNorm(x), x = [1e-3, -2e-3, 3e-3, 5e-4], eps = 1e-5",
                           "always 1", 1, 0.01, rms_tiny, fixed(rms_tiny, 3) + " = sqrt(ms / (ms + eps))"));
  return c;
}

// ------------------------------------------------------------------------------------ agreement

// results.md must not depend on the machine, so --markdown passes include_cuda = false; the
// tour adds CUDA when a device is present.
std::vector<Agreement> agreements(bool include_cuda) {
  std::vector<Agreement> out;
  for (const auto& [tokens, d] : {std::pair<std::size_t, std::size_t>{4, 8}, {64, 768}, {7, 4096}}) {
    Rng rng(3);
    const Tensor2 x = rng.normal_matrix(tokens, d);
    const Tensor1 gamma = rng.normal_vector(d, 1, 0.2), beta = rng.normal_vector(d, 0, 0.2);
    const SwigluWeights w = random_swiglu(rng, d, d / 2 + 3);
    const ch01::Backend& r = reference_backend(ch01::backends());
    const std::string example = std::to_string(tokens) + " x " + std::to_string(d);
    // Row reductions of length d, as in the tests: rtol = 10 eps sqrt(d), times a condition
    // number max|x| / sigma (about 4 for N(0, 1) rows) and max|gamma| (about 2).
    const double tol = 10 * 1.2e-7 * std::sqrt(static_cast<double>(d)) * 4 * 2;
    for (const auto& b : headline_backends(ch01::backends(), include_cuda)) {
      out.push_back({"layer_norm", b.name, example,
                     max_abs_difference(b.layer_norm(x, gamma, beta, 1e-5), r.layer_norm(x, gamma, beta, 1e-5)), tol});
      out.push_back({"rms_norm", b.name, example,
                     max_abs_difference(b.rms_norm(x, gamma, 1e-5), r.rms_norm(x, gamma, 1e-5)), tol});
      out.push_back({"gelu", b.name, example, max_abs_difference(b.gelu(x), r.gelu(x)), 2e-6});
      out.push_back({"ffn_swiglu", b.name, example, max_abs_difference(b.ffn_swiglu(x, w), r.ffn_swiglu(x, w)), 2 * tol});
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------- --markdown

// 000 L371: "mean-centring is the most compute-heavy step" of LayerNorm. The arithmetic of each
// step, per element of the row and per row, as the formulas (and ref::layer_norm) do it.
struct LayerNormStep {
  const char* name;
  const char* formula;
  int ops_per_element;
  const char* per_element;
  const char* per_row;
};
constexpr LayerNormStep kLayerNormSteps[] = {
    {"mean", "mu = (1/d) sum_j x_j", 1, "1 add", "1 division"},
    {"centring", "c_j = x_j - mu", 1, "1 subtract", "-"},
    {"variance", "sigma^2 = (1/d) sum_j c_j^2", 2, "1 multiply, 1 add", "1 division, 1 add (eps), 1 sqrt, 1 division"},
    {"normalise", "x_hat_j = c_j / sqrt(sigma^2 + eps)", 1, "1 multiply (by the reciprocal)", "-"},
    {"scale and shift", "y_j = gamma_j x_hat_j + beta_j", 2, "1 multiply, 1 add", "-"},
};

int layer_norm_ops_per_element() {
  int total = 0;
  for (const auto& step : kLayerNormSteps) total += step.ops_per_element;
  return total;
}

std::string layer_norm_steps_markdown() {
  std::ostringstream md;
  md << "## LayerNorm step by step: arithmetic per element (000 L371)\n\n";
  std::vector<std::vector<std::string>> rows;
  const int total = layer_norm_ops_per_element();
  for (const auto& step : kLayerNormSteps)
    rows.push_back({step.name, step.formula, step.per_element, step.per_row,
                    fixed(100.0 * step.ops_per_element / total, 0) + "%"});
  md << markdown_table({"step", "formula", "per element", "per row", "share of the per-element operations"}, rows)
     << "\n" << total
     << " operations per element (RMSNorm: 1 multiply and 1 add for the sum of squares, 1 multiply by 1/r, 1 by "
        "gamma: 4). Centring is 1 of them, the mean and the centring together 2, as many as the variance alone or the "
        "scale and shift alone. Every step reads or writes d floats per row, and one operation per 4-byte element "
        "is far below what a core can do while the bytes arrive: a norm runs at memory speed (see the lesson), and "
        "what the mean costs there is a pass over the row and a reduction that the variance must wait for.\n\n";
  return md.str();
}

// 000 L373, L379: "the float subtraction x - mu loses precision; RMSNorm is numerically more
// stable". Rows of d = 1024 features, x_j = mean + N(0, 1) in float, gamma = 1, beta = 0, eps =
// 1e-5, against the double oracle (analysis::layer_norm_exact, rms_norm_exact).
std::string norm_precision_markdown() {
  std::ostringstream md;
  md << "## LayerNorm vs RMSNorm in float32 as the mean grows: 16 rows of d = 1024, x = mean + N(0, 1), seed 11\n\n"
        "Error relative to the output's size, max_j |y - y*| / max_j |y*| (the worst row), against a double "
        "oracle computed from the same float inputs. \"Textbook\": every operation in float, in order "
        "(analysis::layer_norm_float32, rms_norm_float32). The chapter's own implementations: ref accumulates in "
        "double, opt in float with a shift (Chan, Golub and LeVeque's corrected two-pass).\n\n";
  const std::size_t tokens = 16, d = 1024;
  const double eps = 1e-5;
  const Tensor1 gamma = xt::ones<float>({d}), beta = xt::zeros<float>({d});
  const ch01::Backend& r = reference_backend(ch01::backends());
  const auto opt = headline_backends(ch01::backends(), /*include_cuda=*/false);
  std::vector<std::vector<std::string>> rows;
  for (double mean : {0.0, 1.0, 10.0, 100.0, 1e3, 1e4}) {
    Rng rng(11);
    const Tensor2 x = rng.normal_matrix(tokens, d, mean, 1.0);
    const DTensor2 ln = analysis::layer_norm_exact(x, eps), rms = analysis::rms_norm_exact(x, eps);
    const Tensor2 rms_textbook = analysis::rms_norm_float32(x, eps);
    // The chapter's implementations are accurate to a few u at every mean: printed as a bound
    // (their last digits depend on the SIMD width, and results.md must not).
    double chapter_worst = 0;
    for (const auto& b : opt) {
      chapter_worst = std::max({chapter_worst, analysis::normwise_relative_error(b.layer_norm(x, gamma, beta, eps), ln),
                                analysis::normwise_relative_error(b.rms_norm(x, gamma, eps), rms)});
    }
    chapter_worst = std::max({chapter_worst, analysis::normwise_relative_error(r.layer_norm(x, gamma, beta, eps), ln),
                              analysis::normwise_relative_error(r.rms_norm(x, gamma, eps), rms)});
    rows.push_back({fixed(mean, 0), sci(analysis::normwise_relative_error(analysis::layer_norm_float32(x, eps), ln), 2),
                    sci(analysis::normwise_relative_error(rms_textbook, rms), 2),
                    sci(analysis::spread_relative_error(rms_textbook, rms), 2),
                    chapter_worst < 4 * 5.96e-8 ? "< 4u" : sci(chapter_worst, 2)});
  }
  md << markdown_table({"mean / spread", "textbook LayerNorm", "textbook RMSNorm",
                        "textbook RMSNorm, error / std of its output", "ref and opt, both norms"},
                       rows)
     << "\nu = 2^-24 = 5.96e-08. The textbook LayerNorm's error grows like u x mean/spread: its float mean is off "
        "by about u x mean, and that offset is divided by the spread. RMSNorm's output is accurate to about u of "
        "its size at every mean; but for a large mean that output is nearly constant (x_j / r = 1 + (x_j - "
        "mean)/r), so the part that differs between features is 1/mean of it, and measured against that part its "
        "error grows like u x mean/spread too. A LayerNorm that accumulates in double or shifts its float sums "
        "(ref and opt) is as accurate as RMSNorm at every mean.\n\n";
  return md.str();
}

// 000 L383: ReLU's units "die"; GELU and SiLU keep a gradient.
std::string dying_units_markdown() {
  std::ostringstream md;
  const std::size_t units = 4096, batch = 64;
  md << "## Dying units: ReLU vs GELU vs SiLU, pre-activations N(mu, 1), " << units << " units x " << batch
     << " samples, seed 3\n\n"
        "A bias shift b moves every pre-activation of a unit: mu = b for inputs that average 0. \"zero\": the "
        "fraction of (unit, sample) pairs with f'(z) = 0 exactly; \"< 0.01\": nearly dead, |f'(z)| < 0.01; "
        "\"dead units\": the fraction of units with f'(z) = 0 on every sample of the batch, which no update of "
        "this batch can revive.\n\n";
  std::vector<std::vector<std::string>> rows;
  using analysis::Activation;
  for (double mu : {2.0, 1.0, 0.0, -1.0, -2.0, -3.0}) {
    const auto relu = analysis::zero_gradient_fractions(Activation::relu, mu, units, batch, 0.01, 3);
    const auto gelu = analysis::zero_gradient_fractions(Activation::gelu, mu, units, batch, 0.01, 3);
    const auto silu = analysis::zero_gradient_fractions(Activation::silu, mu, units, batch, 0.01, 3);
    const double phi = analysis::normal_cdf(-mu);
    rows.push_back({fixed(mu, 0), fixed(relu.exactly_zero, 4), fixed(phi, 4), fixed(relu.dead_units, 4),
                    fixed(std::pow(phi, static_cast<double>(batch)), 4), fixed(gelu.exactly_zero, 4),
                    fixed(gelu.below_threshold, 4), fixed(silu.exactly_zero, 4), fixed(silu.below_threshold, 4)});
  }
  md << markdown_table({"mu", "ReLU zero", "Phi(-mu)", "ReLU dead units", "Phi(-mu)^64", "GELU zero", "GELU < 0.01",
                        "SiLU zero", "SiLU < 0.01"},
                       rows)
     << "\nGELU' = Phi(z) + z phi(z) and SiLU' = s(z)(1 + z(1 - s(z))) are 0 only at one point each (z = -0.75 "
        "and z = -2.40) and underflow to 0 in double only below z = -38.6 and z = -745, so no unit of theirs is dead; their nearly-dead "
        "fractions are the pre-activations near those points and, for GELU, far in the negative tail, where GELU' "
        "is as flat as ReLU's.\n\n";
  return md.str();
}

std::string markdown(const GlobalOptions&) {
  std::ostringstream md;
  md << results_header("01_normalization", "Chapter 01, normalization and activations");
  md << "## The documents' numbers\n\n" << checks_markdown(document_checks()) << '\n';

  md << "## FFN width and parameters (no biases)\n\n";
  std::vector<std::vector<std::string>> rows;
  for (long long d : {512LL, 768LL, 4096LL, 5120LL, 8192LL, 12288LL}) {
    const double dense = analysis::ffn_params(FfnKind::relu, d, 4 * d);
    const long long llama = analysis::llama_intermediate_size(d);
    rows.push_back({std::to_string(d), std::to_string(4 * d), sci(dense, 4), fixed(analysis::swiglu_equal_params_width(d), 1),
                    std::to_string(llama), sci(analysis::ffn_params(FfnKind::swiglu, d, llama), 4),
                    fixed(analysis::ffn_params(FfnKind::swiglu, d, llama) / dense, 4)});
  }
  md << markdown_table({"d_model", "ReLU/GELU d_ff = 4d", "params", "SwiGLU 8d/3", "LLaMA rounding (x256)",
                        "SwiGLU params", "ratio"},
                       rows)
     << '\n';

  md << "## Post-LN vs Pre-LN: 12 random blocks, d_model 64, 16 tokens, seed 5\n\n"
        "RMS of the activations entering each layer, and of the gradient of a fixed random linear loss "
        "with respect to them (layer 12 = the output).\n\n";
  const auto post = analysis::residual_stack(analysis::NormPlacement::post_ln, 12, 64, 16, 5);
  const auto pre = analysis::residual_stack(analysis::NormPlacement::pre_ln, 12, 64, 16, 5);
  rows.clear();
  for (std::size_t l = 0; l < post.activation_rms.size(); ++l)
    rows.push_back({std::to_string(l), fixed(post.activation_rms[l], 3), fixed(pre.activation_rms[l], 3),
                    fixed(post.gradient_rms[l], 4), fixed(pre.gradient_rms[l], 4)});
  md << markdown_table({"layer", "Post-LN activation RMS", "Pre-LN activation RMS", "Post-LN gradient RMS",
                        "Pre-LN gradient RMS"},
                       rows)
     << '\n';

  md << layer_norm_steps_markdown() << norm_precision_markdown() << dying_units_markdown();
  md << "## GELU: exact vs tanh approximation\n\n";
  double gap = 0.0, where = 0.0;
  for (int i = -6000; i <= 6000; ++i) {
    const double x = i / 1000.0;
    const double exact = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    const double approx = 0.5 * x * (1 + std::tanh(std::sqrt(2 / 3.141592653589793) * (x + 0.044715 * x * x * x)));
    if (std::fabs(exact - approx) > gap) gap = std::fabs(exact - approx), where = x;
  }
  md << "max |GELU(x) - GELU_tanh(x)| on [-6, 6] (step 0.001): " << sci(gap, 3) << " at x = " << fixed(where, 3)
     << "\n\n";
  md << "## Reference vs optimized\n\n" << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// ------------------------------------------------------------------------------------- --step

// Prints token 0 through every step; returns LayerNorm's x_hat of token 0 (computed in double).
DTensor2 step_through(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, const SwigluWeights& w, double eps) {
  std::ostream& out = std::cout;
  const std::size_t d = x.shape()[1];
  const Tensor2 row = xt::view(x, xt::range(0, 1), xt::all());
  out << "LayerNorm and RMSNorm of token 0 (d_model = " << d << ", eps = " << eps << ")\n";
  print_step(out, 1, "the input row x");
  print_matrix(out, "x", row);
  double mu = 0.0;
  for (std::size_t j = 0; j < d; ++j) mu += row(0, j) / static_cast<double>(d);
  print_step(out, 2, "LayerNorm: mean mu = (1/d) sum_j x_j = " + fixed(mu, 6));
  DTensor2 centred = xt::cast<double>(row) - mu;
  print_matrix(out, "x - mu", centred);
  double var = 0.0;
  for (double v : centred) var += v * v / static_cast<double>(d);
  const double rstd = 1 / std::sqrt(var + eps);
  print_step(out, 3, "variance sigma^2 = (1/d) sum_j (x_j - mu)^2 = " + fixed(var, 6) + ", 1/sqrt(sigma^2 + eps) = " + fixed(rstd, 6));
  const DTensor2 xhat = centred * rstd;
  print_matrix(out, "x_hat", xhat);
  print_step(out, 4, "scale and shift: y = gamma * x_hat + beta");
  print_matrix(out, "gamma", DTensor2(xt::reshape_view(xt::cast<double>(gamma), {std::size_t{1}, d})));
  print_matrix(out, "beta", DTensor2(xt::reshape_view(xt::cast<double>(beta), {std::size_t{1}, d})));
  const Tensor2 ln = ref::layer_norm(row, gamma, beta, eps);
  print_matrix(out, "LayerNorm(x)", ln);

  double ms = 0.0;
  for (std::size_t j = 0; j < d; ++j) ms += static_cast<double>(row(0, j)) * row(0, j) / static_cast<double>(d);
  print_step(out, 5, "RMSNorm: no mean; r = sqrt((1/d) sum_j x_j^2 + eps) = " + fixed(std::sqrt(ms + eps), 6));
  print_matrix(out, "x / r", DTensor2(xt::cast<double>(row) / std::sqrt(ms + eps)));
  print_matrix(out, "RMSNorm(x) = gamma * x / r", ref::rms_norm(row, gamma, eps));

  print_step(out, 6, "activations at a few points");
  const Tensor2 points = {{-3.0f, -1.2785f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 3.0f}};
  print_matrix(out, "x", points);
  print_matrix(out, "ReLU", ref::relu(points));
  print_matrix(out, "GELU (erf)", ref::gelu(points));
  print_matrix(out, "GELU (tanh)", ref::gelu_tanh(points));
  print_matrix(out, "SiLU = Swish_1 (minimum -0.2785 at -1.2785)", ref::silu(points));

  print_step(out, 7, "SwiGLU FFN of token 0: gate g = x W1, up u = x W2");
  Tensor2 gate = xt::zeros<float>({std::size_t{1}, w.w1.shape()[1]}), up = gate;
  for (std::size_t j = 0; j < w.w1.shape()[1]; ++j)
    for (std::size_t c = 0; c < d; ++c) {
      gate(0, j) += row(0, c) * w.w1(c, j);
      up(0, j) += row(0, c) * w.w2(c, j);
    }
  print_matrix(out, "g", gate);
  print_matrix(out, "u", up);
  print_step(out, 8, "h = Swish(g) * u   (the Swish branch gates the linear branch)");
  const Tensor2 h = ref::silu(gate) * up;
  print_matrix(out, "h", h);
  print_step(out, 9, "y = h W3 (back to d_model)");
  print_matrix(out, "FFN_SwiGLU(x)", ref::ffn_swiglu(row, w));
  return xhat;
}

// ---------------------------------------------------------------------------------------- run

// The Post-LN / Pre-LN experiment of results.md as a figure: RMS of activations and gradients by layer.
std::string depth_figure() {
  const auto post = analysis::residual_stack(analysis::NormPlacement::post_ln, 12, 64, 16, 5);
  const auto pre = analysis::residual_stack(analysis::NormPlacement::pre_ln, 12, 64, 16, 5);
  return svg_line_plot({{"Post-LN activations", post.activation_rms, "#1f5fa8", false},
                        {"Pre-LN activations", pre.activation_rms, "#c0392b", false},
                        {"Post-LN gradient", post.gradient_rms, "#1f5fa8", true},
                        {"Pre-LN gradient", pre.gradient_rms, "#c0392b", true}},
                       "12 random residual blocks, d_model 64: RMS by layer", "layer (12 = output)", "RMS", false);
}

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown(g);
    return 0;
  }
  const char* fn = "01_normalization";
  require_positive(fn, "--tokens", o.tokens);
  require_positive(fn, "--d-model", o.d_model);
  require(o.d_ff >= 0, fn, "--d-ff (", o.d_ff, ") must be >= 0 (0 means the LLaMA width for d_model)");
  require(std::isfinite(o.eps) && o.eps >= 0, fn, "--eps (", o.eps, ") must be finite and >= 0");
  if (!o.svg.empty()) {
    write_svg(o.svg, depth_figure());
    std::cout << "wrote " << o.svg << "\n";
    return 0;
  }
  // --load: the sizes are the arrays' (x sets tokens and d_model, w1 d_ff), read from the headers
  // only: the run is costed before the values are read.
  const Load load(o.load);
  int tokens_size = o.tokens, d_model_size = o.d_model, d_ff_size = o.d_ff;
  if (load.enabled()) {
    const auto x_shape = load.shape("x", 2, "[tokens, d_model]");
    const auto w1_shape = load.shape("w1", 2, "[d_model, d_ff]");
    tokens_size = size_from_load(o, "--tokens", o.tokens, x_shape[0], "x.npy's dimension 0 (tokens)");
    d_model_size = size_from_load(o, "--d-model", o.d_model, x_shape[1], "x.npy's dimension 1 (d_model)");
    d_ff_size = size_from_load(o, "--d-ff", o.d_ff, w1_shape[1], "w1.npy's dimension 1 (d_ff)");
  }
  const auto tokens = static_cast<std::size_t>(tokens_size), d = static_cast<std::size_t>(d_model_size);
  const std::size_t d_ff = d_ff_size > 0 ? static_cast<std::size_t>(d_ff_size)
                                         : static_cast<std::size_t>(analysis::llama_intermediate_size(d_model_size, 8));
  // What the run will take, before anything is allocated: the SwiGLU weights (3 d d_ff), the inputs,
  // each backend's four outputs and the FFN's hidden activations; the loop reference's FFN products.
  const std::string width_option = d_ff_size > 0 ? "--d-ff" : "--d-model";
  RunCost cost;
  cost.memory("the SwiGLU weights W1, W3, W2", {3, d, d_ff}, sizeof(float), width_option)
      .memory("the inputs and every backend's outputs", {4 * ch01::backends().size() + 1, tokens, d}, sizeof(float),
              "--tokens")
      .memory("the FFN's hidden activations", {3, tokens, d_ff}, sizeof(float), "--tokens")
      .work("the loop reference's FFN products", {3, tokens, d, d_ff}, "--tokens");
  cost.require_affordable(g, o);
  Rng rng(g.seed);
  const Tensor2 x = load.enabled() ? load.tensor2("x", {tokens, d}, "[tokens, d_model]") : rng.normal_matrix(tokens, d);
  const Tensor1 gamma = load.enabled() ? load.tensor1("gamma", {d}, "[d_model] (that of x.npy)")
                                       : rng.normal_vector(d, 1, 0.2);
  const Tensor1 beta = load.enabled() ? load.tensor1("beta", {d}, "[d_model] (that of x.npy)")
                                      : rng.normal_vector(d, 0, 0.2);
  const SwigluWeights w =
      load.enabled() ? SwigluWeights{load.tensor2("w1", {d, d_ff}, "[d_model, d_ff] (x.npy's d_model)"),
                                     load.tensor2("w2", {d, d_ff}, "[d_model, d_ff] (those of w1.npy)"),
                                     load.tensor2("w3", {d_ff, d}, "[d_ff, d_model] (those of w1.npy)")}
                     : random_swiglu(rng, d, d_ff);
  // Agreement threshold: float vs double row reductions of length d (and d_ff in the FFN), relative
  // to the size of each output (below: a loaded x of magnitude 1e4 has activations of that size).
  const double threshold = 1e-5 * std::sqrt(static_cast<double>(std::max(d, d_ff)));
  // Each backend's outputs: the functions it provides, of the four this command shows.
  const auto run_one = [&](const ch01::Backend& b) -> std::optional<Run> {
    Run run;
    if (b.layer_norm) run.outputs.push_back({"layer_norm", b.layer_norm(x, gamma, beta, o.eps), threshold});
    if (b.rms_norm) run.outputs.push_back({"rms_norm", b.rms_norm(x, gamma, o.eps), threshold});
    // Every activation of x (gelu is the erf form, gelu_tanh the tanh approximation).
    if (b.relu) run.outputs.push_back({"relu", b.relu(x), threshold});
    if (b.gelu) run.outputs.push_back({"gelu", b.gelu(x), threshold});
    if (b.gelu_tanh) run.outputs.push_back({"gelu_tanh", b.gelu_tanh(x), threshold});
    if (b.silu) run.outputs.push_back({"silu", b.silu(x), threshold});
    if (b.ffn_swiglu) run.outputs.push_back({"ffn_swiglu", b.ffn_swiglu(x, w), threshold});
    if (run.outputs.empty()) return std::nullopt;
    return run;
  };
  // The reference first: it validates everything, so --step never prints an invalid case.
  Run expected = *run_one(reference_backend(ch01::backends()));
  for (Output& out : expected.outputs) {
    const double largest = std::visit([](const auto& t) { return static_cast<double>(xt::amax(xt::abs(t))()); }, out.value);
    out.tolerance *= std::max(1.0, largest);
  }
  DTensor2 step_x_hat;
  if (o.step) step_x_hat = step_through(x, gamma, beta, w, o.eps);
  Dump dump(o.dump);
  if (o.step) dump.write_double("step_x_hat", step_x_hat);  // token 0's normalised row, in double
  dump.write("x", x);
  dump.write("gamma", gamma);
  dump.write("beta", beta);
  dump.write("w1", w.w1);
  dump.write("w2", w.w2);
  dump.write("w3", w.w3);
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         "norms, GELU and SwiGLU FFN: tokens " + std::to_string(tokens) + ", d_model " +
                             std::to_string(d) + ", d_ff " + std::to_string(d_ff) + ", seed " + std::to_string(g.seed),
                         {{"tokens", tokens}, {"d_model", d}, {"d_ff", d_ff}, {"eps", o.eps}},
                         g.format == "json"};
  return run_backends(ch01::backends(), o.backend, run_one, expected, dump, report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "norm";
  c.summary = "LayerNorm and RMSNorm (forward, backward), ReLU/GELU/SiLU, SwiGLU FFN widths, Post-LN vs Pre-LN";
  c.figures.push_back({"docs/figures/ch01_post_ln_vs_pre_ln.svg", "norm"});
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "norm", "Chapter 01: normalization, activations and the FFN", *o,
        "print LayerNorm, RMSNorm, the activations and SwiGLU step by step",
        "write x.npy, gamma.npy, beta.npy, w1..w3.npy, <function>_<backend>.npy (the norms, relu, gelu, "
        "gelu_tanh, silu of x, the FFN) and, with --step, step_x_hat.npy (float64) to DIR",
        backend_lines(ch01::backends()), [o, &global] { return run(*o, global); });
    sub.option("--tokens", o->tokens, "number of tokens");
    sub.option("--d-model", o->d_model, "model width d_model");
    sub.option("--d-ff", o->d_ff, "SwiGLU width (default: LLaMA's 8/3 d_model rounded to 8)", ShowDefault::no);
    sub.option("--eps", o->eps, "epsilon of the norms");
    sub.option("--svg", o->svg, "draw the Post-LN / Pre-LN activation and gradient RMS by layer into FILE", ShowDefault::no);
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

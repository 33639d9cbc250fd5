// `tvlab 02_position_encoding` (alias `tvlab rope`): RoPE step by step, the context-extension
// methods per frequency pair, ALiBi, the extrapolation experiment, learned vs sinusoidal positions.

#include <omp.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <numbers>
#include <optional>
#include <sstream>

#include "../common/svg.hpp"
#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/npy_load.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/analysis/attention_entropy.hpp"
#include "tvlab/analysis/rope_extrapolation.hpp"
#include "tvlab/analysis/sinusoidal_extrapolation.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/rope_hf_config.hpp"
#include "tvlab/cuda/attention.hpp"
#include "tvlab/cuda/rope.hpp"
#include "tvlab/cuda/rope_attention.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/alibi.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/rope.hpp"
#include "tvlab/opt/rope_attention.hpp"
#include "tvlab/ref/alibi.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/learned_positions.hpp"
#include "tvlab/analysis/relative_position_bias.hpp"
#include "tvlab/ref/rope.hpp"
#include "tvlab/ref/rope_attention.hpp"
#include "tvlab/ref/sinusoidal.hpp"

namespace tvlab::cli {
namespace {

constexpr double kPi = std::numbers::pi;

constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();

// The RoPE options start unset (NaN, 0, "") so that those given on the command line can override
// a --hf-config file's values; without a file the defaults below (kDefault...) apply.
struct Options : StandardOptions {
  std::string svg, figure = "scaling", layout = "half_split", rope_type, hf_config, short_factor, long_factor;
  int seq = 6, head_dim = 0, heads = 2;
  double theta = kUnset, factor = kUnset, beta_fast = kUnset, beta_slow = kUnset, mscale = kUnset,
         mscale_all_dim = kUnset, attention_factor = kUnset, low_freq_factor = kUnset, high_freq_factor = kUnset,
         partial_rotary_factor = kUnset;
  long long original_length = 0, max_position_embeddings = 0, first_position = 0;
  bool truncate = false, no_truncate = false;
};

constexpr int kDefaultHeadDim = 8;
constexpr double kDefaultTheta = 10000.0, kDefaultFactor = 4.0;
constexpr long long kDefaultOriginalLength = 4096;
constexpr const char* kDefaultRopeType = "yarn";

RopeConfig rope_config(int head_dim, double theta, const std::string& type, double factor, long long original) {
  RopeConfig cfg;
  cfg.head_dim = head_dim;
  cfg.rope_theta = theta;
  cfg.max_position_embeddings = original;
  cfg.rope_scaling.rope_type = type;
  cfg.rope_scaling.factor = type == "default" ? 1.0 : factor;
  cfg.rope_scaling.original_max_position_embeddings = original;
  return cfg;
}

// YaRN's correction dimension: the (fractional) pair index whose wavelength fits `rotations`
// times into L, d ln(L / (2 pi rotations)) / (2 ln b) (the paper's eq. 17 / Hugging Face).
double correction_dim(double rotations, int d, double base, double length) {
  return d * std::log(length / (rotations * 2 * kPi)) / (2 * std::log(base));
}

// ------------------------------------------------------------------------------ the outputs

struct Inputs {
  Tensor3 q, k, v;
  RopeFrequencies freqs;
  RopeLayout layout;
  long long first_position;
  bool rotate_k = false;  // also compare R k (the command dumps it; the tables show q only)
};

// Agreement threshold for attention (as in the tests): a score is a length-d dot product of
// size about sqrt(d) after the 1/sqrt(d) scale, the output a length-seq reduction (see
// tvlab::attention_tolerance). RoPE and ALiBi are elementwise: a few ulp.
// YaRN's attention factor a_f multiplies the rotated q and k, so the scores by a_f^2.
double attention_tolerance(const Inputs& in) {
  const std::size_t d = in.q.shape()[2];
  const double a_f = in.freqs.attention_factor;
  return tvlab::attention_tolerance(d, in.k.shape()[1], a_f * a_f * std::sqrt(static_cast<double>(d)),
                                    static_cast<double>(xt::amax(xt::abs(in.v))()));
}

// The chapter's functions on one backend, those it provides: RoPE on q, ALiBi's bias, causal
// attention with RoPE and causal attention with ALiBi.
std::optional<Run> run_on(const ch02::Backend& b, const Inputs& in) {
  const auto heads = static_cast<int>(in.q.shape()[0]);
  const auto seq = static_cast<long long>(in.q.shape()[1]);
  AttentionConfig causal, with_alibi;
  causal.mask.causal = with_alibi.mask.causal = true;
  const AttentionRope rope{in.freqs, in.layout, in.first_position};
  with_alibi.mask.alibi_slopes = ref::alibi_slopes(heads);
  // A rotated coordinate is a_f (x cos - y sin): at most sqrt(2) a_f max|q|, a few ulp of it.
  const double elementwise =
      4e-7 * std::sqrt(2.0) * in.freqs.attention_factor * static_cast<double>(xt::amax(xt::abs(in.q))()) + 1e-6;
  const double attention = attention_tolerance(in);
  Run run;
  if (b.apply_rope)
    run.outputs.push_back({"apply_rope", b.apply_rope(in.q, in.freqs, in.layout, in.first_position), elementwise});
  if (b.apply_rope && in.rotate_k) {
    // k's coordinates are as large as q's (both N(0, 1) unless loaded): the same bound with max|k|.
    const double k_elementwise =
        4e-7 * std::sqrt(2.0) * in.freqs.attention_factor * static_cast<double>(xt::amax(xt::abs(in.k))()) + 1e-6;
    run.outputs.push_back({"apply_rope_k", b.apply_rope(in.k, in.freqs, in.layout, in.first_position), k_elementwise});
  }
  if (b.alibi_bias)
    run.outputs.push_back({"alibi_bias", b.alibi_bias(heads, seq, seq, ref::AlibiMode::causal),
                           1e-6 * static_cast<double>(seq)});
  if (b.rope_attention)
    run.outputs.push_back({"attention_rope", b.rope_attention(in.q, in.k, in.v, rope, causal), attention, "attention + RoPE"});
  if (b.attention)
    run.outputs.push_back(
        {"attention_alibi", b.attention(in.q, in.k, in.v, with_alibi), attention, "attention + ALiBi"});
  if (run.outputs.empty()) return std::nullopt;
  return run;
}

const Tensor3& tensor3(const Run& run, const std::string& name) { return std::get<Tensor3>(output_named(run, name).value); }

// q, k, v drawn from `seed`, or read from `load`'s folder when it is enabled (--load).
Inputs make_inputs(std::uint64_t seed, int heads, int seq, int head_dim, const RopeFrequencies& freqs,
                   RopeLayout layout, long long first_position, const Load& load = Load("")) {
  Rng rng(seed);
  const auto h = static_cast<std::size_t>(heads), n = static_cast<std::size_t>(seq), d = static_cast<std::size_t>(head_dim);
  const std::string meaning = "[heads, seq, head_dim] (those of q.npy)";
  Inputs in;
  in.q = load.enabled() ? load.tensor3("q", {h, n, d}, "[heads, seq, head_dim]") : rng.normal_tensor(h, n, d);
  in.k = load.enabled() ? load.tensor3("k", {h, n, d}, meaning) : rng.normal_tensor(h, n, d);
  in.v = load.enabled() ? load.tensor3("v", {h, n, d}, meaning) : rng.normal_tensor(h, n, d);
  in.freqs = freqs;
  in.layout = layout;
  in.first_position = first_position;
  return in;
}

// ------------------------------------------------------------------------------ the documents

DocumentCheck statement(std::string source, std::string quantity, std::string says, std::string computed, bool agrees) {
  return {std::move(source), std::move(quantity), std::move(says), std::move(computed), agrees};
}

std::vector<DocumentCheck> document_checks() {
  std::vector<DocumentCheck> c;
  const RopeFrequencies plain = ref::rope_frequencies(rope_config(128, 1e4, "default", 1, 4096));
  c.push_back(statement("000 L319", "sinusoidal encoding: the frequency of pair i", "10000^(2i/d)",
                        "omega_i = 10000^(-2i/d); 10000^(2i/d) is the wavelength / 2 pi (the divisor)", false));
  c.push_back(check_number("000 L321", "RoPE theta_1 = 10000^(-2/d), d = 128", "10000^(-2i/d)", std::pow(1e4, -2.0 / 128),
                           1e-7, plain.inv_freq(1), fixed(plain.inv_freq(1), 7)));
  const double ntk = ref::ntk_aware_base(1e4, 4, 128);
  c.push_back(check_number("000 L327", "NTK-aware base beta alpha^(d/(d-2)), d = 128, alpha = 4", "formula", ntk, 1e-6,
                           1e4 * std::pow(4.0, 128.0 / 126.0), fixed(ntk, 3)));
  const RopeFrequencies ntk_freqs = ref::rope_frequencies(rope_config(128, ntk, "default", 1, 4096));
  const double lowest_ratio = plain.inv_freq(63) / ntk_freqs.inv_freq(63);
  c.push_back(statement("000 L329", "NTK-aware: what alpha^(d/(d-2)) is for",
                        "keeps the high-frequency angles in the trained range",
                        "the fast pairs barely move (theta_0 = 1 for any base); it brings the slow pairs into range, "
                        "the slowest divided by exactly alpha (" + fixed(lowest_ratio, 6) + ")",
                        false));
  c.push_back(statement("000 L335", "which method scales every frequency alike (\"one cut for all\")", "NTK-aware",
                        "PI (linear): theta_i / s for every i; NTK-aware scales pair i by alpha^(-2i/(d-2)), 1 to 1/alpha",
                        false));
  const RopeConfig yarn_cfg = rope_config(128, 1e4, "yarn", 4, 4096);
  const RopeFrequencies yarn = ref::rope_frequencies(yarn_cfg);
  c.push_back(statement("000 L339", "YaRN low band (r < alpha): the frequency", "keeps theta",
                        "theta / s: pair 63 has theta'/theta = " + fixed(yarn.inv_freq(63) / plain.inv_freq(63), 4) +
                            " (s = 4)",
                        false));
  c.push_back(statement("000 L340", "YaRN high band (r > beta): the frequency", "keeps theta",
                        "theta: pair 0 has theta'/theta = " + fixed(yarn.inv_freq(0) / plain.inv_freq(0), 4), true));
  const double low = std::floor(correction_dim(32, 128, 1e4, 4096)), high = std::ceil(correction_dim(1, 128, 1e4, 4096));
  c.push_back(statement("000 L343", "YaRN alpha = 1, beta = 32 (beta_slow, beta_fast)", "alpha = 1, beta = 32",
                        "the ramp runs over pairs " + fixed(low, 0) + " .. " + fixed(high, 0) +
                            " for d = 128, b = 1e4, L = 4096",
                        true));
  const double mscale = 0.1 * std::log(4.0) + 1;
  c.push_back(statement("000 L345", "YaRN temperature", "t = sqrt(alpha_t / s + 1)",
                        "sqrt(1/t) = 0.1 ln s + 1 = " + fixed(mscale, 7) + " at s = 4; logits times " +
                            fixed(mscale * mscale, 4),
                        false));
  c.push_back(statement("000 L347", "effect of YaRN's temperature", "temperature rises, attention smoother",
                        "t = 1 / (0.1 ln s + 1)^2 < 1: logits grow, attention sharper", false));
  // The premise of YaRN's temperature: measured entropy of one query's attention, random q and k.
  const auto entropy = analysis::attention_entropy(128, 1e4, 4096, 4, {4096, 16384}, 4, 7);
  c.push_back(statement("000 L343", "extending the context makes attention sharper (more concentrated)", "sharper",
                        "flatter: entropy " + fixed(entropy[0].original, 2) + " nats at n = L = 4096, " +
                            fixed(entropy[1].original, 2) + " at 4L (ln 4 = 1.39 more); YaRN's factor lowers it to " +
                            fixed(entropy[1].yarn_with_factor, 2) + " (random q, k; see 'Attention entropy' below)",
                        false));
  const auto far = analysis::sinusoidal_nearest_trained(512, 1e4, 512, {1024, 131072});
  c.push_back(statement("000 L319", "sinusoidal positions beyond L may collide with trained encodings", "may collide",
                        "no collision for d_model 512, L = 512: beyond 2L the closest trained encoding has cosine " +
                            fixed(far[0].similarity, 3) + " vs " + fixed(analysis::sinusoidal_similarity(512, 1e4, 1), 3) +
                            " between neighbours; but " + std::to_string(analysis::sinusoidal_unseen_pairs(512, 1e4, 512)) +
                            " of 256 pairs reach unseen values (see below)",
                        false));
  const DTensor1 slopes8 = ref::alibi_slopes(8);
  c.push_back(statement("000 L357", "ALiBi: almost unlimited extrapolation", "any length",
                        "any length runs, but a head attends within about ln(100) / m_h tokens (99% of its weight): " +
                            fixed(std::log(100.0) / slopes8(7), 0) +
                            " for the flattest of 8 heads; nothing beyond is used (see the experiment below)",
                        false));
  c.push_back(statement("000 L355", "ALiBi slope m", "learnable, per head",
                        "fixed, 2^(-8h/n): " + fixed(slopes8(0), 4) + " .. " + fixed(slopes8(7), 6) + " for 8 heads",
                        false));
  // Exercise 1: (R_m q) . (R_n k) = q . R_{n-m} k, checked in double over many (m, n).
  double worst = 0.0;
  Rng rng(11);
  const Tensor3 q = rng.normal_tensor(1, 1, 64), k = rng.normal_tensor(1, 1, 64);
  const RopeFrequencies f = ref::rope_frequencies(rope_config(64, 1e4, "default", 1, 4096));
  for (long long m : {0LL, 5LL, 100LL, 3000LL})
    for (long long n : {0LL, 7LL, 100LL, 4000LL}) {
      if (n < m) continue;
      const Tensor3 a = ref::apply_rope(q, f, RopeLayout::interleaved, m), b = ref::apply_rope(k, f, RopeLayout::interleaved, n);
      const Tensor3 kd = ref::apply_rope(k, f, RopeLayout::interleaved, n - m);
      double lhs = 0, rhs = 0;
      for (std::size_t i = 0; i < 64; ++i) {
        lhs += static_cast<double>(a(0, 0, i)) * b(0, 0, i);
        rhs += static_cast<double>(q(0, 0, i)) * kd(0, 0, i);
      }
      worst = std::max(worst, std::fabs(lhs - rhs));
    }
  c.push_back(statement("000 L414", "exercise 1: (R_m q) . (R_n k) = q . R_{n-m} k", "holds",
                        "max |lhs - rhs| = " + sci(worst, 2) + " over 10 (m, n), d = 64 (float rotations)", worst < 1e-4));
  c.push_back(statement("003 4.2", "learned positions beyond the trained length (512 -> 1024)", "random, untrained values",
                        "no row exists: the lookup fails (see 'Learned vs sinusoidal' below)", false));
  return c;
}

// ------------------------------------------------------------------------------------ agreement

std::vector<Agreement> agreements(bool include_cuda) {
  std::vector<Agreement> out;
  struct Example {
    int heads, seq, head_dim;
    std::string type, layout;
    long long first;
  };
  for (const Example& e : {Example{2, 6, 8, "default", "interleaved", 0}, Example{8, 128, 64, "yarn", "half_split", 0},
                           Example{4, 100, 128, "linear", "half_split", 5000}}) {
    const RopeFrequencies freqs = ref::rope_frequencies(rope_config(e.head_dim, 1e4, e.type, 4, 4096));
    const Inputs in = make_inputs(3, e.heads, e.seq, e.head_dim, freqs,
                                  e.layout == "interleaved" ? RopeLayout::interleaved : RopeLayout::half_split, e.first);
    const Run r = *run_on(reference_backend(ch02::backends()), in);
    const std::string example = std::to_string(e.heads) + " x " + std::to_string(e.seq) + " x " +
                                std::to_string(e.head_dim) + ", " + e.type + ", " + e.layout +
                                (e.first ? ", from " + std::to_string(e.first) : "");
    for (const auto& b : headline_backends(ch02::backends(), include_cuda)) {
      const auto rows = agreements_of(b.name, example, *run_on(b, in), r);
      out.insert(out.end(), rows.begin(), rows.end());
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------- --markdown

std::string frequency_table(int d, double base, long long L, double s) {
  const auto methods = analysis::extension_methods(d, base, L, s);
  const DTensor1& theta = methods.front().freqs.inv_freq;
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i : {0UL, 8UL, 16UL, 20UL, 24UL, 28UL, 32UL, 36UL, 40UL, 44UL, 46UL, 48UL, 56UL, 63UL}) {
    const double wavelength = 2 * kPi / theta(i);
    std::vector<std::string> row = {std::to_string(i), sci(theta(i), 4), sci(wavelength, 4),
                                    fixed(static_cast<double>(L) / wavelength, 3)};
    for (std::size_t m = 1; m < methods.size(); ++m) row.push_back(fixed(methods[m].freqs.inv_freq(i) / theta(i), 4));
    rows.push_back(row);
  }
  std::vector<std::string> header = {"pair i", "theta_i", "wavelength 2 pi / theta_i", "r = L / wavelength"};
  for (std::size_t m = 1; m < methods.size(); ++m) header.push_back(methods[m].name + ": theta'/theta");
  return markdown_table(header, rows);
}

std::string yarn_configurations_table() {
  std::vector<std::vector<std::string>> rows;
  for (double base : {1e4, 5e5})
    for (long long L : {4096LL, 8192LL})
      for (double s : {4.0, 8.0, 16.0}) {
        const RopeConfig cfg = rope_config(128, base, "yarn", s, L);
        const RopeFrequencies f = ref::rope_frequencies(cfg);
        const double low = std::floor(correction_dim(32, 128, base, static_cast<double>(L)));
        const double high = std::ceil(correction_dim(1, 128, base, static_cast<double>(L)));
        int kept = 0, interpolated = 0;
        for (std::size_t i = 0; i < 64; ++i) {
          const double theta = std::pow(base, -2.0 * static_cast<double>(i) / 128);
          // Equal up to rounding (the test recomputes theta_i with another formula order).
          kept += std::fabs(f.inv_freq(i) - theta) <= 1e-12 * theta ? 1 : 0;
          interpolated += std::fabs(f.inv_freq(i) - theta / s) <= 1e-12 * theta ? 1 : 0;
        }
        rows.push_back({sci(base, 1), std::to_string(L), fixed(s, 0), fixed(low, 0) + " .. " + fixed(high, 0),
                        std::to_string(kept), std::to_string(64 - kept - interpolated), std::to_string(interpolated),
                        fixed(f.attention_factor, 7), fixed(f.attention_factor * f.attention_factor, 4)});
      }
  return markdown_table({"base", "original L", "factor s", "ramp (pairs)", "kept theta", "blended", "theta / s",
                         "attention factor", "logit factor"},
                        rows);
}

std::string extrapolation_table(double s) {
  auto rows = analysis::rope_extrapolation(128, 1e4, 4096, s, 16, 7);
  rows.push_back(analysis::alibi_extrapolation(128, 4096, s, 8, 16, 7));
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({r.method, std::to_string(r.unseen_angle_pairs), fixed(100 * r.outside_range, 3) + "%",
                     fixed(100 * r.self_below_minimum, 3) + "%", fixed(r.short_range_change, 4),
                     std::isnan(r.neighbour_resolution) ? "no rotation" : fixed(r.neighbour_resolution, 4),
                     sci(r.weight_beyond_original, 2)});
  return markdown_table({"method", "pairs with unseen angles", "scores beyond L outside the trained range",
                         "self-match scores below the trained minimum", "short-range change (distance < 64)",
                         "theta'_0 / theta_0", "attention weight at distances >= L (query at sL - 1)"},
                        table);
}

// The entropy of one query's attention as n grows past L, with YaRN's frequencies, with and without
// its attention factor (random q and keys; analysis::attention_entropy).
std::string entropy_table() {
  const auto rows = analysis::attention_entropy(128, 1e4, 4096, 4, {1024, 2048, 4096, 8192, 16384}, 8, 7);
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({std::to_string(r.length), fixed(r.uniform, 3), fixed(r.original, 3), fixed(r.yarn, 3),
                     fixed(r.yarn_with_factor, 3), fixed(r.uniform - 0.5, 3),
                     fixed(r.uniform - std::pow(r.attention_factor, 4) / 2, 3)});
  return markdown_table({"keys n", "ln n (uniform)", "original frequencies", "YaRN, no factor", "YaRN with a_f",
                         "ln n - 1/2", "ln n - a_f^4 / 2"},
                        table);
}

// Sinusoidal encodings (d_model 512, L = 512) of positions beyond L against the trained ones.
std::string sinusoidal_beyond_table() {
  const auto rows = analysis::sinusoidal_nearest_trained(512, 1e4, 512, {512, 1024, 2048, 8192, 32768, 131072});
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({std::to_string(r.first) + " .. " + std::to_string(r.last - 1), std::to_string(r.position),
                     std::to_string(r.nearest), fixed(r.similarity, 4), fixed(r.distance, 3)});
  return markdown_table({"positions p", "closest p", "its nearest trained p' < 512", "cosine similarity",
                         "distance |PE(p) - PE(p')|"},
                        table);
}

// T5's buckets for a few relative positions r = j - i', encoder and decoder (32 buckets, max_distance 128).
std::string t5_bucket_table() {
  std::vector<std::vector<std::string>> table;
  for (long long r : {-1000LL, -128LL, -127LL, -64LL, -32LL, -16LL, -15LL, -8LL, -7LL, -1LL, 0LL, 1LL, 7LL, 8LL, 16LL,
                      64LL, 128LL})
    table.push_back({std::to_string(r), std::to_string(analysis::t5_relative_position_bucket(r, true, 32, 128)),
                     std::to_string(analysis::t5_relative_position_bucket(r, false, 32, 128))});
  return markdown_table({"r = j - i'", "bidirectional (encoder)", "unidirectional (decoder)"}, table);
}

std::string learned_vs_sinusoidal() {
  std::ostringstream md;
  Rng rng(9);
  const Tensor2 table = rng.normal_matrix(512, 64, 0, 0.02);  // as if learned for 512 positions
  md << "A learned table with 512 rows (d_model 64), asked for positions 1000 .. 1023:\n\n```\n";
  try {
    ref::learned_position_embedding(table, 1000, 24);
  } catch (const Error& e) {
    md << e.what() << "\n";
  }
  md << "```\n\nThe sinusoidal encoding is a formula of the position, so any position has one, and the dot "
        "product of two encodings depends only on their distance k (d_model 64):\n\n";
  std::vector<std::vector<std::string>> rows;
  for (long long p : {0LL, 511LL, 1000LL, 100000LL}) {
    std::vector<std::string> row = {std::to_string(p)};
    for (long long k : {1LL, 16LL, 256LL}) {
      const Tensor2 a = ref::sinusoidal_position_encoding(1, 64, 1e4, p), b = ref::sinusoidal_position_encoding(1, 64, 1e4, p + k);
      double dot = 0;
      for (std::size_t c = 0; c < 64; ++c) dot += static_cast<double>(a(0, c)) * b(0, c);
      row.push_back(fixed(dot, 4));
    }
    rows.push_back(row);
  }
  md << markdown_table({"position p", "PE(p) . PE(p+1)", "PE(p) . PE(p+16)", "PE(p) . PE(p+256)"}, rows);
  return md.str();
}

std::string markdown(const GlobalOptions&) {
  std::ostringstream md;
  md << results_header("02_position_encoding", "Chapter 02, position encoding and context extrapolation");
  md << "## The documents' numbers and statements\n\n" << checks_markdown(document_checks()) << '\n';
  md << "## What each method does to each frequency pair\n\n"
        "head_dim 128, base 10000, original length L = 4096, factor s = 4 (dynamic NTK evaluated at length sL). "
        "theta'/theta = 1 keeps the pre-training frequency, 0.25 = 1/s interpolates it.\n\n"
     << frequency_table(128, 1e4, 4096, 4) << '\n';
  md << "## YaRN for realistic configurations (head_dim 128, beta_fast 32, beta_slow 1)\n\n"
        "The ramp is measured in the original length L. Attention factor = 0.1 ln s + 1 multiplies cos and sin, "
        "so the logits grow by its square.\n\n"
     << yarn_configurations_table() << '\n';
  md << "## DeepSeek's variant: the temperature in the softmax scale\n\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, m] : {std::pair<std::string, double>{"DeepSeek-V3 (mscale = mscale_all_dim = 1)", 1.0},
                                {"DeepSeek-V2 (mscale = mscale_all_dim = 0.707)", 0.707}}) {
    RopeScaling sc;
    sc.rope_type = "yarn";
    sc.factor = 40;
    sc.mscale = m;
    sc.mscale_all_dim = m;
    RopeConfig cfg = rope_config(64, 1e4, "yarn", 40, 4096);
    cfg.rope_scaling = sc;
    cfg.rope_scaling.original_max_position_embeddings = 4096;
    rows.push_back({name, fixed(ref::rope_frequencies(cfg).attention_factor, 4),
                    fixed(ref::deepseek_softmax_scale_factor(sc), 7)});
  }
  md << markdown_table({"model (factor 40)", "cos/sin factor", "softmax scale multiplier"}, rows) << '\n';
  md << "## ALiBi slopes\n\n";
  rows.clear();
  for (int n : {8, 12, 16}) {
    const DTensor1 m = ref::alibi_slopes(n);
    std::string list;
    for (std::size_t h = 0; h < m.size(); ++h) list += (h ? ", " : "") + sci(m(h), 4);
    rows.push_back({std::to_string(n), list});
  }
  md << markdown_table({"heads", "slopes m_1 .. m_n"}, rows) << '\n';
  md << "## The extrapolation experiment (random q and k, no trained model)\n\n"
        "head_dim 128, base 10000, L = 4096, s = 4, 16 random (q, k) pairs with N(0, 1) entries, seed 7. "
        "Scores are q . R k / sqrt(d) with cos/sin not multiplied by YaRN's attention factor. ALiBi: q . k / sqrt(d) - m_h Delta "
        "with the 8-head slopes, sample n in head n mod 8. Last column: the query at position sL - 1 with the same key at "
        "every distance 0 .. sL-1.\n\n"
     << extrapolation_table(4) << '\n';
  md << "## Attention entropy beyond the training length (000 L343)\n\n"
        "Entropy (nats) of the attention of the query at position n - 1 over keys 0 .. n-1: head_dim 128, base 10000, "
        "L = 4096, YaRN with s = 4 (a_f = "
     << fixed(0.1 * std::log(4.0) + 1, 4)
     << ", logits times a_f^2), 8 random queries with one random key per position (N(0, 1)), seed 7. Larger = flatter; "
        "ln n is the entropy of evenly spread attention. The last two columns are the limit for independent "
        "N(0, sigma^2) scores, ln n - sigma^2 / 2, with sigma^2 = 1 and a_f^4.\n\n"
     << entropy_table() << '\n';
  md << "## Sinusoidal encodings beyond the training length (000 L319)\n\n"
        "d_model 512, base 10000, trained positions 0 .. 511. The cosine similarity of two encodings depends on their "
        "distance only; two neighbouring trained positions have "
     << fixed(analysis::sinusoidal_similarity(512, 1e4, 1), 4) << ", positions 16 apart "
     << fixed(analysis::sinusoidal_similarity(512, 1e4, 16), 4) << ". "
     << analysis::sinusoidal_unseen_pairs(512, 1e4, 512)
     << " of the 256 frequency pairs never complete a turn in 512 positions, so beyond 511 they take (sin, cos) values "
        "no trained position had. For each range of positions, the one whose encoding comes closest to a trained "
        "encoding:\n\n"
     << sinusoidal_beyond_table() << '\n';
  md << "## T5's relative position buckets\n\n"
        "num_buckets 32, max_distance 128; r = j - i' is the key's position minus the query's.\n\n"
     << t5_bucket_table() << '\n';
  md << "## Learned vs sinusoidal absolute positions\n\n" << learned_vs_sinusoidal() << '\n';
  md << "## Reference vs optimized\n\n" << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// ------------------------------------------------------------------------------------- --step

// What --step computed in double, for --dump: the angles m theta_i and RoPE's relative scores.
struct Steps {
  DTensor2 angles, scores;
};

Steps step_through(const RopeConfig& cfg, const Inputs& in) {
  std::ostream& out = std::cout;
  // pairs: the rotated pairs (fewer than d / 2 with partial_rotary_factor < 1).
  const std::size_t d = in.q.shape()[2], pairs = in.freqs.inv_freq.size(), seq = in.q.shape()[1];
  const bool interleaved = in.layout == RopeLayout::interleaved;
  out << "RoPE and ALiBi, head 0 (seq " << seq << ", head_dim " << d << ", base " << cfg.rope_theta << ", "
      << (interleaved ? "pairs (2i, 2i+1)" : "pairs (i, i + d_r/2)");
  if (2 * pairs < d) out << ", rotary_dim d_r = " << 2 * pairs << ": coordinates " << 2 * pairs << " .. " << d - 1 << " pass through";
  out << ")\n";
  print_step(out, 1, "frequencies theta_i (base^(-2i/d_r), then scaled by rope_type " + cfg.rope_scaling.rope_type +
                         ") and wavelengths 2 pi / theta_i");
  DTensor2 freq = DTensor2::from_shape({2, pairs});
  for (std::size_t i = 0; i < pairs; ++i) {
    freq(0, i) = in.freqs.inv_freq(i);
    freq(1, i) = 2 * kPi / in.freqs.inv_freq(i);
  }
  print_matrix(out, "theta_i; wavelength", freq);
  if (in.freqs.attention_factor != 1.0) out << "  attention factor a_f = " << fixed(in.freqs.attention_factor, 6) << "\n";

  print_step(out, 2, "angles m theta_i for each position m (rows) and pair i (columns)");
  DTensor2 angles = DTensor2::from_shape({seq, pairs});
  for (std::size_t m = 0; m < seq; ++m)
    for (std::size_t i = 0; i < pairs; ++i)
      angles(m, i) = static_cast<double>(in.first_position + static_cast<long long>(m)) * in.freqs.inv_freq(i);
  print_matrix(out, "m theta_i", angles);

  const Tensor3 q0 = xt::view(in.q, xt::range(0, 1), xt::all(), xt::all());
  print_step(out, 3, "q (head 0), then each pair rotated: (a, b) -> (a cos - b sin, a sin + b cos)");
  print_matrix(out, "q", Tensor2(xt::view(q0, 0, xt::all(), xt::all())));
  const Tensor3 q_rot = ref::apply_rope(q0, in.freqs, in.layout, in.first_position);
  print_matrix(out, "R_m q", Tensor2(xt::view(q_rot, 0, xt::all(), xt::all())));
  DTensor2 norms = DTensor2::from_shape({2, seq});
  for (std::size_t m = 0; m < seq; ++m) {
    double a = 0, b = 0;
    for (std::size_t c = 0; c < d; ++c) {
      a += static_cast<double>(q0(0, m, c)) * q0(0, m, c);
      b += static_cast<double>(q_rot(0, m, c)) * q_rot(0, m, c);
    }
    norms(0, m) = std::sqrt(a);
    norms(1, m) = std::sqrt(b);
  }
  print_matrix(out, "|q_m|; |R_m q_m| (a rotation keeps lengths, times a_f)", norms);

  print_step(out, 4, "the same q and k at every position: RoPE scores depend only on n - m (constant diagonals)");
  Tensor3 same_q = Tensor3::from_shape({1, seq, d}), same_k = same_q;
  for (std::size_t m = 0; m < seq; ++m)
    for (std::size_t c = 0; c < d; ++c) {
      same_q(0, m, c) = in.q(0, 0, c);
      same_k(0, m, c) = in.k(0, 0, c);
    }
  const Tensor3 rq = ref::apply_rope(same_q, in.freqs, in.layout, in.first_position);
  const Tensor3 rk = ref::apply_rope(same_k, in.freqs, in.layout, in.first_position);
  DTensor2 scores = DTensor2::from_shape({seq, seq});
  for (std::size_t m = 0; m < seq; ++m)
    for (std::size_t n = 0; n < seq; ++n) {
      double s = 0;
      for (std::size_t c = 0; c < d; ++c) s += static_cast<double>(rq(0, m, c)) * rk(0, n, c);
      scores(m, n) = s / std::sqrt(static_cast<double>(d));
    }
  print_matrix(out, "(R_m q) . (R_n k) / sqrt(d)", scores);

  const DTensor1 slopes = ref::alibi_slopes(static_cast<int>(in.q.shape()[0]));
  print_step(out, 5, "ALiBi: head slopes m_h (2^(-8h/n) when n is a power of two) and head 0's causal bias -m_0 (i - j)");
  // Every slope up to 16 heads (the lab computes them all), elided beyond.
  print_matrix(out, "m_h", DTensor2(xt::reshape_view(slopes, {std::size_t{1}, slopes.size()})), 4, 16);
  const Tensor3 bias = ref::alibi_bias(static_cast<int>(in.q.shape()[0]), static_cast<long long>(seq),
                                       static_cast<long long>(seq), ref::AlibiMode::causal);
  print_matrix(out, "B_0", Tensor2(xt::view(bias, 0, xt::all(), xt::all())));

  print_step(out, 6, "causal attention of head 0 with RoPE and with ALiBi (outputs)");
  const Run r = *run_on(reference_backend(ch02::backends()), in);
  print_matrix(out, "Attention + RoPE", Tensor2(xt::view(tensor3(r, "attention_rope"), 0, xt::all(), xt::all())));
  print_matrix(out, "Attention + ALiBi", Tensor2(xt::view(tensor3(r, "attention_alibi"), 0, xt::all(), xt::all())));

  // YaRN with this configuration's lengths and factor (the default 4 when it has none), whole heads.
  const double factor = cfg.rope_scaling.factor > 1.0 ? cfg.rope_scaling.factor : kDefaultFactor;
  const long long original_length = cfg.rope_scaling.original_max_position_embeddings > 0
                                        ? cfg.rope_scaling.original_max_position_embeddings
                                        : cfg.max_position_embeddings;
  print_step(out, 7, "YaRN per pair for head_dim " + std::to_string(d) + ", factor " + fixed(factor, 2) +
                         ", original length " + std::to_string(original_length));
  const int head_dim = static_cast<int>(d);
  const RopeFrequencies plain = ref::rope_frequencies(rope_config(head_dim, cfg.rope_theta, "default", 1, original_length));
  const RopeFrequencies yarn = ref::rope_frequencies(rope_config(head_dim, cfg.rope_theta, "yarn", factor, original_length));
  DTensor2 table = DTensor2::from_shape({2, d / 2});
  for (std::size_t i = 0; i < d / 2; ++i) {
    table(0, i) = static_cast<double>(original_length) * plain.inv_freq(i) / (2 * kPi);
    table(1, i) = yarn.inv_freq(i) / plain.inv_freq(i);
  }
  print_matrix(out, "r_i = L / wavelength; theta'/theta", table);
  out << "  r > 32: kept (theta'/theta = 1); r < 1: interpolated (1/s); between: the ramp. Attention factor "
      << fixed(yarn.attention_factor, 6) << "\n";
  return {angles, scores};
}

// ---------------------------------------------------------------------------------------- figures

// theta'_i / theta_i per pair for every extension method (log scale): YaRN's three regions.
std::string scaling_figure(double factor) {
  const auto methods = analysis::extension_methods(128, 1e4, 4096, factor);
  const char* colors[] = {"#888888", "#1f5fa8", "#c0392b", "#e67e22", "#27ae60"};
  const char* short_names[] = {"none", "PI", "NTK-aware", "dynamic NTK", "YaRN"};
  std::vector<Series> series;
  for (std::size_t m = 1; m < methods.size(); ++m) {
    std::vector<double> y;
    for (std::size_t i = 0; i < 64; ++i) y.push_back(methods[m].freqs.inv_freq(i) / methods[0].freqs.inv_freq(i));
    series.push_back({short_names[m], y, colors[m], m == 3});
  }
  return svg_line_plot(series, "theta'/theta per pair (d 128, base 1e4, L 4096, s " + fixed(factor, 0) + ")",
                       "pair index i (high frequency -> low)", "theta' / theta (log scale)", true);
}

// Logit of a key equal to the query, relative to distance 0, for RoPE (q = k = ones, d = 128:
// sqrt(d) (mean_i cos(Delta theta_i) - 1)) and ALiBi's -m_h Delta for three of 8 heads.
std::string decay_figure() {
  const RopeFrequencies f = ref::rope_frequencies(rope_config(128, 1e4, "default", 1, 4096));
  const DTensor1 m = ref::alibi_slopes(8);
  std::vector<double> rope, alibi3, alibi5, alibi8;
  for (int delta = 0; delta < 256; ++delta) {
    double mean_cos = 0;
    for (std::size_t i = 0; i < 64; ++i) mean_cos += std::cos(delta * f.inv_freq(i)) / 64;
    rope.push_back(std::sqrt(128.0) * (mean_cos - 1));
    alibi3.push_back(-m(2) * delta);
    alibi5.push_back(-m(4) * delta);
    alibi8.push_back(-m(7) * delta);
  }
  return svg_line_plot({{"RoPE, q = k", rope, "#1f5fa8", false},
                        {"ALiBi m = 1/8", alibi3, "#c0392b", true},
                        {"ALiBi m = 1/32", alibi5, "#e67e22", true},
                        {"ALiBi m = 1/256", alibi8, "#27ae60", true}},
                       "logit change with distance: RoPE vs ALiBi", "distance i - j", "logit minus logit at distance 0",
                       false);
}

// ---------------------------------------------------------------------------------------- run

RopeLayout parse_layout(const std::string& s) {
  require(s == "interleaved" || s == "half_split", "02_position_encoding", "--layout ('", s,
          "') must be interleaved or half_split");
  return s == "interleaved" ? RopeLayout::interleaved : RopeLayout::half_split;
}

// "1, 1.5,2" -> {1, 1.5, 2} for --short-factor and --long-factor.
std::vector<double> parse_numbers(const char* option, const std::string& text) {
  std::vector<double> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    double v = 0.0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used > 0 && item.find_first_not_of(" \t", used) == std::string::npos, "02_position_encoding", option,
            " ('", text, "') must be numbers separated by commas; '", item, "' is not a number");
    values.push_back(v);
  }
  return values;
}

// The RoPE configuration of the run: the --hf-config file's (or the defaults without one), then
// every option given on the command line on top. Option values are checked here, naming the
// option; the relations between fields (beta_fast > beta_slow, a list per rotated pair, ...) by
// validate_rope_config, naming the field.
RopeConfig resolve_rope_config(const Options& o) {
  const char* fn = "02_position_encoding";
  HfRopeConfig file;
  if (!o.hf_config.empty()) {
    file = read_hf_rope_config(o.hf_config);
  } else {
    file.config = rope_config(kDefaultHeadDim, kDefaultTheta, o.rope_type.empty() ? kDefaultRopeType : o.rope_type,
                              kDefaultFactor, kDefaultOriginalLength);
  }
  RopeConfig cfg = file.config;
  RopeScaling& sc = cfg.rope_scaling;
  auto given = [](double v) { return !std::isnan(v); };
  if (o.head_dim != 0) {
    require(o.head_dim > 0 && o.head_dim % 2 == 0, fn, "--head-dim (", o.head_dim, ") must be positive and even");
    cfg.head_dim = o.head_dim;
  }
  if (given(o.theta)) {
    require(std::isfinite(o.theta) && o.theta > 1, fn, "--theta (", o.theta, ") must be finite and > 1");
    cfg.rope_theta = o.theta;
  }
  if (!o.rope_type.empty()) {
    bool known = false;
    for (const std::string& t : rope_types()) known = known || o.rope_type == t;
    require(known, fn, "--rope-type ('", o.rope_type, "') must be default, linear, dynamic, yarn, llama3 or longrope");
    sc.rope_type = o.rope_type;
  }
  if (given(o.factor)) {
    require(std::isfinite(o.factor) && o.factor >= 1, fn, "--factor (", o.factor, ") must be finite and >= 1");
    sc.factor = o.factor;
  }
  if (o.original_length != 0) {
    require(o.original_length > 0, fn, "--original-length (", o.original_length, ") must be positive");
    sc.original_max_position_embeddings = o.original_length;
    if (o.hf_config.empty()) cfg.max_position_embeddings = o.original_length;  // as before: L = the trained length
  }
  if (o.max_position_embeddings != 0) {
    require(o.max_position_embeddings > 0, fn, "--max-position-embeddings (", o.max_position_embeddings,
            ") must be positive");
    cfg.max_position_embeddings = o.max_position_embeddings;
  }
  // Without a factor in the file, yarn and longrope take max_position_embeddings / L (Hugging Face).
  if (!file.factor_given && !given(o.factor) && sc.original_max_position_embeddings > 0)
    sc.factor = static_cast<double>(cfg.max_position_embeddings) /
                static_cast<double>(sc.original_max_position_embeddings);
  auto positive = [&](const char* option, double v) {
    require(std::isfinite(v) && v > 0, fn, option, " (", v, ") must be finite and positive");
    return v;
  };
  auto non_negative = [&](const char* option, double v) {
    require(std::isfinite(v) && v >= 0, fn, option, " (", v, ") must be finite and >= 0");
    return v;
  };
  if (given(o.beta_fast)) sc.beta_fast = positive("--beta-fast", o.beta_fast);
  if (given(o.beta_slow)) sc.beta_slow = positive("--beta-slow", o.beta_slow);
  if (given(o.mscale)) sc.mscale = non_negative("--mscale", o.mscale);
  if (given(o.mscale_all_dim)) sc.mscale_all_dim = non_negative("--mscale-all-dim", o.mscale_all_dim);
  if (given(o.attention_factor)) sc.attention_factor = positive("--attention-factor", o.attention_factor);
  if (given(o.low_freq_factor)) sc.low_freq_factor = positive("--low-freq-factor", o.low_freq_factor);
  if (given(o.high_freq_factor)) sc.high_freq_factor = positive("--high-freq-factor", o.high_freq_factor);
  if (given(o.partial_rotary_factor)) {
    require(std::isfinite(o.partial_rotary_factor) && o.partial_rotary_factor > 0 && o.partial_rotary_factor <= 1, fn,
            "--partial-rotary-factor (", o.partial_rotary_factor, ") must be in (0, 1]");
    cfg.partial_rotary_factor = o.partial_rotary_factor;
  }
  require(!(o.truncate && o.no_truncate), fn, "--truncate and --no-truncate contradict each other: give one");
  if (o.truncate) sc.truncate = true;
  if (o.no_truncate) sc.truncate = false;
  if (!o.short_factor.empty()) sc.short_factor = parse_numbers("--short-factor", o.short_factor);
  if (!o.long_factor.empty()) sc.long_factor = parse_numbers("--long-factor", o.long_factor);
  if (sc.rope_type == "longrope")
    require(!sc.short_factor.empty() && !sc.long_factor.empty(), fn,
            "--rope-type longrope needs --short-factor and --long-factor (or an --hf-config file with them): ",
            "rotary_dim / 2 = ", rotary_dim(cfg) / 2, " numbers each");
  return cfg;
}

int run(const Options& given, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown(g);
    return 0;
  }
  const char* fn = "02_position_encoding";
  // --load: the sizes are q.npy's, read from its header only (the run is costed first).
  const Load load(given.load);
  Options o = given;
  if (load.enabled()) {
    const auto q_shape = load.shape("q", 3, "[heads, seq, head_dim]");
    o.heads = size_from_load(given, "--heads", given.heads, q_shape[0], "q.npy's dimension 0 (heads)");
    o.seq = size_from_load(given, "--seq", given.seq, q_shape[1], "q.npy's dimension 1 (seq)");
    o.head_dim = size_from_load(given, "--head-dim", given.head_dim, q_shape[2], "q.npy's dimension 2 (head_dim)");
  }
  require_positive(fn, "--seq", o.seq);
  require_positive(fn, "--heads", o.heads);
  // Positions are angles' multipliers in double: whole numbers up to 2^53 stay exact.
  constexpr long long kMaxPosition = 1LL << 53;
  require(o.first_position >= 0 && o.first_position <= kMaxPosition - o.seq, "--first-position",
          "(", o.first_position, ") must be >= 0, and --first-position + --seq at most 2^53 = ", kMaxPosition,
          " (beyond, positions are no longer exact in double)");
  if (!o.svg.empty()) {
    require(o.figure == "scaling" || o.figure == "decay", fn, "--figure ('", o.figure, "') must be scaling or decay");
    const double factor = std::isnan(o.factor) ? kDefaultFactor : o.factor;
    require(std::isfinite(factor) && factor > 1, fn, "--factor (", factor, ") must be > 1 for the figure");
    write_svg(o.svg, o.figure == "scaling" ? scaling_figure(factor) : decay_figure());
    std::cout << "wrote " << o.svg << "\n";
    return 0;
  }
  const RopeLayout layout = parse_layout(o.layout);
  const RopeConfig cfg = resolve_rope_config(o);
  // What the run will take, before anything is allocated: the inputs, every backend's outputs (ALiBi's
  // bias is heads x seq x seq), the optimized attention's scores per thread; the loop reference's two
  // causal attentions (RoPE, ALiBi).
  const auto heads = static_cast<std::uint64_t>(o.heads), n = static_cast<std::uint64_t>(o.seq),
             d = static_cast<std::uint64_t>(cfg.head_dim);
  const std::size_t backends = ch02::backends().size();
  RunCost cost;
  cost.memory("the inputs q, k, v", {3, heads, n, d}, sizeof(float), "--seq")
      .memory("every backend's ALiBi bias", {backends + 1, heads, n, n}, sizeof(float), "--seq")
      .memory("every backend's rotated q and k and attention outputs", {4 * backends + 4, heads, n, d}, sizeof(float),
              "--seq")
      .memory("the scores of one head per thread", {static_cast<std::uint64_t>(omp_get_max_threads()), n, n},
              sizeof(float), "--seq")
      .work("the loop reference's two causal attentions, and the other backends'", {heads, n, n, 2 * d + kExpCost},
            "--seq", backends_work_factor(o.backend, backends));
  cost.require_affordable(g, given);
  // n = the last position + 1: dynamic NTK rescales its base for it, longrope picks its list by it.
  const long long seq_len = o.first_position + o.seq;
  const RopeFrequencies freqs = ref::rope_frequencies(cfg, seq_len);
  Inputs in = make_inputs(g.seed, o.heads, o.seq, cfg.head_dim, freqs, layout, o.first_position, load);
  in.rotate_k = true;
  // The reference first: it validates everything, so --step never prints an invalid case.
  const Run expected = *run_on(reference_backend(ch02::backends()), in);
  std::optional<Steps> steps;
  if (o.step) steps = step_through(cfg, in);
  Dump dump(o.dump);
  if (steps) {
    dump.write_double("step_angles", steps->angles);
    dump.write_double("step_scores", steps->scores);
  }
  dump.write("q", in.q);
  dump.write("k", in.k);
  dump.write("v", in.v);
  dump.write_double("inv_freq", freqs.inv_freq);  // computed in double
  const RopeScaling& sc = cfg.rope_scaling;
  const std::vector<double> inv_freq(freqs.inv_freq.begin(), freqs.inv_freq.end());
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         "RoPE (" + sc.rope_type + ", " + o.layout + "), ALiBi and attention with each: heads " +
                             std::to_string(o.heads) + ", seq " + std::to_string(o.seq) + ", head_dim " +
                             std::to_string(cfg.head_dim) + ", seed " + std::to_string(g.seed),
                         {{"heads", o.heads}, {"seq", o.seq}, {"head_dim", cfg.head_dim}, {"rope_type", sc.rope_type},
                          {"factor", sc.factor}, {"layout", o.layout}, {"rope_theta", cfg.rope_theta},
                          {"max_position_embeddings", cfg.max_position_embeddings},
                          {"original_max_position_embeddings", sc.original_max_position_embeddings},
                          {"partial_rotary_factor", cfg.partial_rotary_factor}, {"rotary_dim", rotary_dim(cfg)},
                          {"seq_len", seq_len}, {"attention_factor", freqs.attention_factor},
                          {"inv_freq", inv_freq}},
                         g.format == "json"};
  return run_backends(ch02::backends(), o.backend, [&in](const ch02::Backend& b) { return run_on(b, in); }, expected,
                      dump, report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "rope";
  c.summary = "sinusoidal and learned positions, RoPE, PI / NTK / dynamic NTK / YaRN / Llama 3 / LongRoPE, ALiBi, extrapolation";
  c.figures.push_back({"docs/figures/ch02_frequency_scaling.svg", "rope --figure scaling --factor 4"});
  c.figures.push_back({"docs/figures/ch02_logit_decay.svg", "rope --figure decay"});
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "rope", "Chapter 02: position encoding and context extrapolation", *o,
        "print the frequencies, angles, rotated q, RoPE's relative scores, ALiBi's bias and YaRN's per-pair table",
        "write q.npy, k.npy, v.npy, inv_freq.npy (float64), <function>_<backend>.npy (apply_rope: R q, "
        "apply_rope_k: R k) and, with --step, step_angles.npy and step_scores.npy (float64) to DIR",
        backend_lines(ch02::backends()), [o, &global] { return run(*o, global); });
    sub.option("--seq", o->seq, "number of positions");
    sub.option("--heads", o->heads, "number of heads");
    sub.option("--head-dim", o->head_dim, "head dimension d (even; default 8)", ShowDefault::no);
    sub.option("--theta", o->theta, "RoPE base (rope_theta; default 10000)", ShowDefault::no);
    sub.option("--layout", o->layout, "interleaved (pairs 2i, 2i+1) or half_split (pairs i, i + d_r/2)");
    sub.option("--rope-type", o->rope_type,
               "default | linear | dynamic | yarn | llama3 | longrope (default yarn). dynamic: for n = "
               "first position + seq > L = max_position_embeddings (not the original length: Hugging Face "
               "measures dynamic NTK in max_position_embeddings) the base becomes "
               "theta (s n / L - (s - 1))^(d_r/(d_r-2)); up to L nothing changes. longrope: the long factors "
               "for n > original length, the short ones up to it",
               ShowDefault::no);
    sub.option("--factor", o->factor,
               "context extension factor s (default 4; from --hf-config without one: max_position_embeddings / "
               "original length for yarn and longrope)",
               ShowDefault::no);
    sub.option("--original-length", o->original_length,
               "pre-training length L (rope_scaling.original_max_position_embeddings; default 4096, and without "
               "--hf-config also max_position_embeddings)",
               ShowDefault::no);
    sub.option("--max-position-embeddings", o->max_position_embeddings,
               "the extended context length (default: the original length)", ShowDefault::no);
    sub.option("--beta-fast", o->beta_fast, "yarn: pairs turning more than this in L keep theta (default 32)",
               ShowDefault::no);
    sub.option("--beta-slow", o->beta_slow, "yarn: pairs turning fewer times than this in L get theta / s (default 1)",
               ShowDefault::no);
    sub.option("--mscale", o->mscale, "yarn (DeepSeek): attention factor = mscale(s, mscale) / mscale(s, mscale_all_dim)",
               ShowDefault::no);
    sub.option("--mscale-all-dim", o->mscale_all_dim, "yarn (DeepSeek): see --mscale", ShowDefault::no);
    sub.option("--attention-factor", o->attention_factor,
               "yarn, longrope: the factor of cos and sin, instead of the one computed from s", ShowDefault::no);
    sub.option("--low-freq-factor", o->low_freq_factor,
               "llama3: wavelengths above L / low_freq_factor are divided by s (default 1)", ShowDefault::no);
    sub.option("--high-freq-factor", o->high_freq_factor,
               "llama3: wavelengths below L / high_freq_factor are kept (default 4)", ShowDefault::no);
    sub.option("--short-factor", o->short_factor, "longrope: rotary_dim / 2 divisors of theta_i, commas between",
               ShowDefault::no);
    sub.option("--long-factor", o->long_factor, "longrope: as --short-factor, for sequences beyond L",
               ShowDefault::no);
    sub.option("--partial-rotary-factor", o->partial_rotary_factor,
               "rotate only the first d_r = floor(d p) coordinates of each head (default 1)", ShowDefault::no);
    sub.flag("--truncate", o->truncate, "yarn: round the ramp's ends to whole pairs (the default)");
    sub.flag("--no-truncate", o->no_truncate, "yarn: keep the ramp's fractional ends (truncate: false)");
    sub.option("--hf-config", o->hf_config,
               "read rope_theta, max_position_embeddings, head_dim, partial_rotary_factor and rope_scaling / "
               "rope_parameters from a Hugging Face config.json; the options given here override them",
               ShowDefault::no);
    sub.option("--first-position", o->first_position, "position of the first token");
    sub.option("--svg", o->svg, "draw the figure chosen by --figure into FILE", ShowDefault::no);
    sub.choice("--figure", o->figure, {"scaling", "decay"},
               "the figure --svg draws: scaling: theta'/theta per pair for each method (uses --factor); decay: "
               "logit vs distance, RoPE vs ALiBi");
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

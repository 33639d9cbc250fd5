// `tvlab 04_flash_attention` (alias `tvlab flash`): the online softmax block by block, flash
// attention's tiles, the IO model of standard vs tiled attention, FP8 and 16-bit emulation.

#include <algorithm>
#include <cmath>
#include <iostream>
#include <span>
#include <sstream>

#include "../common/svg.hpp"
#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/mask_options.hpp"
#include "../common/npy_load.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/analysis/io_model.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/flash_attention.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/flash_attention.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/flash_attention.hpp"
#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::cli {
namespace {

struct Options : StandardOptions {
  std::string svg;
  int seq = 8, seq_k = 0, head_dim = 4, heads = 1, block_q = 4, block_k = 3;
  MaskOptions mask;
  std::string inputs = "fp32";  // the format of the products' inputs: fp32, fp16, bf16
};

FlashConfig flash_config(const Options& o) {
  FlashConfig cfg;
  cfg.mask = attention_mask(o.mask);
  cfg.block_q = static_cast<std::size_t>(o.block_q);
  cfg.block_k = static_cast<std::size_t>(o.block_k);
  cfg.inputs = o.inputs == "fp16" ? FlashInputs::fp16 : o.inputs == "bf16" ? FlashInputs::bf16 : FlashInputs::fp32;
  return cfg;
}

struct Inputs {
  Tensor3 q, k, v;
  Tensor3 dout;  // the upstream gradient dL/dO for the backward pass (empty: forward only)
};

Inputs make_inputs(std::uint64_t seed, std::size_t heads, std::size_t n, std::size_t d) {
  Rng rng(seed);
  Inputs in;
  in.q = rng.normal_tensor(heads, n, d);
  in.k = rng.normal_tensor(heads, n, d);
  in.v = rng.normal_tensor(heads, n, d);
  return in;
}

// The command's inputs: q [heads, n_q, d], k and v [heads, n_k, d], dout [heads, n_q, d], drawn
// in that order from `seed` or read from `load`'s folder (--load).
Inputs command_inputs(std::uint64_t seed, std::size_t heads, std::size_t n_q, std::size_t n_k, std::size_t d,
                      const Load& load) {
  if (!load.enabled()) {
    Rng rng(seed);
    Inputs in;
    in.q = rng.normal_tensor(heads, n_q, d);
    in.k = rng.normal_tensor(heads, n_k, d);
    in.v = rng.normal_tensor(heads, n_k, d);
    in.dout = rng.normal_tensor(heads, n_q, d);
    return in;
  }
  return {load.tensor3("q", {heads, n_q, d}, "[heads, seq, head_dim]"),
          load.tensor3("k", {heads, n_k, d}, "[heads, seq_k, head_dim] (those of q.npy)"),
          load.tensor3("v", {heads, n_k, d}, "[heads, seq_k, head_dim] (those of k.npy)"),
          load.tensor3("dout", {heads, n_q, d}, "[heads, seq, head_dim] (that of q.npy)")};
}

// Forward pass of one backend: its output and log-sum-exp, and the tiles it computed and skipped;
// with `in.dout`, its backward pass from its own out and lse (fp32 inputs: the backward passes
// take no others). The gradients' tolerance is set on the reference's run (run()).
std::optional<Run> run_on(const ch04::Backend& b, const Inputs& in, const FlashConfig& cfg, double tolerance) {
  if (!b.flash_forward) return std::nullopt;
  const FlashOutput r = b.flash_forward(in.q, in.k, in.v, cfg);
  Run run;
  run.outputs.push_back({"flash_attention_forward", r.out, tolerance});
  // lse = m + ln l: an error e in l moves it by e / l, the same size as the output's.
  run.outputs.push_back({"lse", r.lse, tolerance});
  if (b.flash_backward && in.dout.size() > 0 && cfg.inputs == FlashInputs::fp32 && cfg.fp8 == Fp8Scaling::none) {
    const FlashGrads grads = b.flash_backward(in.q, in.k, in.v, r.out, r.lse, in.dout, cfg);
    run.outputs.push_back({"dq", grads.dq, 0.0});
    run.outputs.push_back({"dk", grads.dk, 0.0});
    run.outputs.push_back({"dv", grads.dv, 0.0});
  }
  run.details = {{"tiles_computed", r.tiles_computed}, {"tiles_skipped", r.tiles_skipped}};
  if (b.limits.tiles_keys)
    run.note = "tiles computed " + std::to_string(r.tiles_computed) + ", skipped " + std::to_string(r.tiles_skipped);
  return run;
}

// As in the tests: a score is a length-d dot product of size about sqrt(d) after the scale, the
// output a length-n reduction (tvlab::attention_tolerance). With 16-bit inputs, two roundings of
// a weight may differ by 2u p_j: 2u max|v| more (u = 2^-11 fp16, 2^-8 bf16), and n 2^-24 max|v|
// for fp16's subnormal weights.
double tolerance(const Inputs& in, FlashInputs inputs = FlashInputs::fp32) {
  const std::size_t d = in.q.shape()[2], n = in.k.shape()[1];
  const double v_max = static_cast<double>(xt::amax(xt::abs(in.v))());
  const double rounding = inputs == FlashInputs::fp16   ? 2 * 0x1p-11 + static_cast<double>(n) * 0x1p-24
                          : inputs == FlashInputs::bf16 ? 2 * 0x1p-8
                                                        : 0.0;
  return tvlab::attention_tolerance(d, n, std::sqrt(static_cast<double>(d)), v_max) + rounding * v_max;
}

// ------------------------------------------------------------------------------ the documents

DocumentCheck statement(std::string source, std::string quantity, std::string says, std::string computed, bool agrees) {
  return {std::move(source), std::move(quantity), std::move(says), std::move(computed), agrees};
}

// Hardware figures from the FlashAttention papers and NVIDIA's specifications (A100 40 GB SXM:
// 108 SMs, 192 KB of L1/shared memory per SM, 1555 GB/s HBM2, 1.41 GHz boost, 128 bytes per
// clock of shared-memory bandwidth per SM; H100 SXM: 132 SMs, 228 KB, 3.35 TB/s, 989 dense BF16
// and 1979 dense FP8 TFLOPS), from which the checks below compute.
std::vector<DocumentCheck> document_checks() {
  std::vector<DocumentCheck> c;
  const double a100_sram_kib = 108 * 192.0;
  c.push_back(check_number("000 L41", "A100 on-chip SRAM, 108 SMs x 192 KB", "20.25 MB", 20.25, 0.01, a100_sram_kib / 1024,
                           fixed(a100_sram_kib / 1024, 2) + " MiB (" + fixed(a100_sram_kib * 1024 / 1e6, 1) + " MB)"));
  const double sram_tbs = 128.0 * 108 * 1.41e9 / 1e12;
  c.push_back(statement("000 L41", "A100 SRAM bandwidth", "tens of TB/s",
                        fixed(sram_tbs, 1) + " TB/s (128 B/clock x 108 SMs x 1.41 GHz; the paper: about 19 TB/s)", false));
  const double tile_kb = 128.0 * 64 * 2 / 1024;
  c.push_back(check_number("000 L53", "a 128 x 64 tile in fp16", "about 8 KB", 8, 1, tile_kb, fixed(tile_kb, 0) + " KiB"));
  const double tiles_per_sm = std::floor(192.0 / (3 * tile_kb));
  c.push_back(check_number("000 L53", "(Q, K, V) tile triples in one SM's 192 KB", "6-8", 7, 1, tiles_per_sm,
                           fixed(tiles_per_sm, 0) + " (thread blocks, not threads)"));
  const double n = 4096, d = 64;
  c.push_back(check_number("000 L57", "score matrix elements, n = 4096", "16.8M", 16.8, 0.1, n * n / 1e6,
                           fixed(n * n / 1e6, 2) + "M"));
  c.push_back(check_number("000 L57", "4 n d, n = 4096, d = 64", "about 1M", 1, 0.1, 4 * n * d / 1e6, fixed(4 * n * d / 1e6, 3) + "M"));
  const analysis::IoCount standard = analysis::standard_attention_io(4096, 64);
  const analysis::IoCount flash = analysis::flash_attention_io(4096, 64, 192 * 1024 / 2);  // 192 KB of fp16
  c.push_back(check_number("000 L57", "IO saving of flash attention, n = 4096, d = 64", "about 16x (n^2 / 4nd)", 16, 1,
                           standard.total() / flash.total(),
                           fixed(standard.total() / flash.total(), 1) + "x: " + sci(standard.total(), 3) + " vs " +
                               sci(flash.total(), 3) + " elements (Algorithm 0 vs 1, M = 192 KB of fp16)"));
  c.push_back(statement("000 L61", "the online softmax update of m and l", "m' = max(m, m~), l' = l e^{m-m'} + l~ e^{m~-m'}",
                        "correct (tests: every block size and every split); the output needs the same rescaling", true));
  c.push_back(statement("000 L63", "HBM accesses of flash attention", "O(n^2) -> O(n)",
                        "Theta(n d + n^2) -> Theta(n^2 d^2 / M); O(n) is its extra memory", false));
  const double fa2_mfu = 225.0 / 312.0;
  c.push_back(check_number("000 L65", "share of A100 peak, 225 of 312 TFLOPS", "about 72% (FlashAttention)", 72, 1,
                           100 * fa2_mfu, fixed(100 * fa2_mfu, 1) + "%, FlashAttention-2's figure, not the first version's"));
  c.push_back(statement("000 L65", "share of peak of earlier implementations", "30-40% (traditional)",
                        "25-40% is FlashAttention-1's, per the FlashAttention-2 paper", false));
  c.push_back(check_number("000 L71", "H100 FP8 dense peak / BF16 dense peak", "2x", 2, 0.1, 1979.0 / 989.4,
                           fixed(1979.0 / 989.4, 2) + "x (the unit is PFLOPS, not PFLOPS/s)"));
  c.push_back(statement("000 L69", "what FlashAttention-3 overlaps", "two attention layers",
                        "the softmax of one warpgroup with the GEMMs of another, inside one kernel", false));
  const double ratio = sram_tbs / 1.555;
  c.push_back(check_number("000 L448", "SRAM vs HBM bandwidth, A100 40 GB", "about 20x", 20, 1, ratio,
                           fixed(ratio, 1) + "x (19.5 / 1.555 TB/s)"));
  c.push_back(check_number("004 L214", "FP8 gain of FlashAttention-3's forward", "an order of magnitude", 10, 1, 1200.0 / 740,
                           fixed(1200.0 / 740, 2) + "x measured (1.2 PFLOPS vs 740 TFLOPS), 2x at peak"));
  return c;
}

// ------------------------------------------------------------------------------------ agreement

std::vector<Agreement> agreements(bool include_cuda) {
  std::vector<Agreement> out;
  struct Example {
    std::size_t heads, n, d;
    bool causal;
    std::size_t bq, bk;
  };
  for (const Example& e : {Example{1, 8, 4, false, 4, 3}, Example{2, 129, 64, true, 64, 64}, Example{4, 300, 128, false, 128, 128}}) {
    const Inputs in = make_inputs(5, e.heads, e.n, e.d);
    FlashConfig cfg;
    cfg.mask.causal = e.causal;
    cfg.block_q = e.bq;
    cfg.block_k = e.bk;
    const FlashOutput r = ref::flash_attention_forward(in.q, in.k, in.v, cfg);
    const std::string example = std::to_string(e.heads) + " x " + std::to_string(e.n) + " x " + std::to_string(e.d) +
                                (e.causal ? ", causal" : "") + ", tiles " + std::to_string(e.bq) + " x " + std::to_string(e.bk);
    AttentionConfig same;
    same.mask.causal = e.causal;
    out.push_back({"flash vs chapter 00 attention (ref)", "ref", example,
                   max_abs_difference(r.out, ref::scaled_dot_product_attention(in.q, in.k, in.v, same)), tolerance(in)});
    for (const auto& variant : opt::flash_variants())
      out.push_back({"flash_attention_forward", "opt_" + variant.name, example,
                     max_abs_difference(variant.function(in.q, in.k, in.v, cfg).out, r.out), tolerance(in)});
    // results.md must not depend on the machine: CUDA only in the tour, when a device is present.
    for (const auto& b : headline_backends(ch04::backends(), include_cuda))
      if (b.kind == BackendKind::cuda)
        out.push_back({"flash_attention_forward", b.name, example,
                       max_abs_difference(b.flash_forward(in.q, in.k, in.v, cfg).out, r.out), tolerance(in)});
  }
  return out;
}

// ------------------------------------------------------------------------------------- --markdown

std::string io_tables() {
  std::ostringstream md;
  md << "Elements moved between HBM and on-chip memory for one head, from the instrumented runs' "
        "closed forms (`analysis::standard_attention_io`, `analysis::flash_attention_io`); M is the "
        "on-chip memory in floats, B_c = ceil(M / 4d), B_r = min(B_c, d).\n\n";
  std::vector<std::vector<std::string>> rows;
  for (std::size_t n : {1024UL, 4096UL, 16384UL})
    for (std::size_t d : {64UL, 128UL})
      for (std::size_t m_kib : {64UL, 100UL, 192UL, 228UL}) {
        const std::size_t m = m_kib * 1024 / 4;  // floats in M KiB
        const analysis::IoCount s = analysis::standard_attention_io(n, d), f = analysis::flash_attention_io(n, d, m);
        rows.push_back({std::to_string(n), std::to_string(d), std::to_string(m_kib) + " KiB (" + std::to_string(m) + ")",
                        sci(s.total(), 3), sci(f.total(), 3), fixed(s.total() / f.total(), 2),
                        fixed(static_cast<double>(m) / (3.0 * static_cast<double>(d * d)), 2),
                        std::to_string(f.peak_sram)});
      }
  md << markdown_table({"n", "d", "M (floats)", "standard", "flash", "standard / flash", "M / 3d^2", "flash peak_sram"},
                       rows)
     << '\n';
  md << "The paper's tile sizes count K_j, V_j, Q_i and O_i but not the score tile or l and m, so the "
        "tiles can need more than M (peak_sram, in floats). "
        "Doubling M halves flash's traffic (one pass over Q and O per key tile, and there are n / B_c key "
        "tiles); standard attention's 4 n^2 does not depend on M. Both grow as n^2, so the advantage is "
        "about M / 3d^2 at every length, which is why the larger SRAM of newer GPUs and a smaller head "
        "dimension both help.\n\n";
  return md.str();
}

// The memory hierarchy of the two GPUs the documents discuss, computed from their specifications:
// streaming multiprocessors, L1/shared memory per SM, boost clock, HBM bandwidth; shared memory
// delivers 128 bytes per clock per SM on both.
std::string hardware_table() {
  struct Gpu {
    std::string name;
    double sms, sram_kib, clock_ghz, hbm_tbs;
  };
  std::vector<std::vector<std::string>> rows;
  for (const Gpu& g : {Gpu{"A100 40 GB SXM", 108, 192, 1.41, 1.555}, Gpu{"A100 80 GB SXM", 108, 192, 1.41, 2.039},
                       Gpu{"H100 SXM", 132, 256, 1.98, 3.35}}) {
    const double total_mib = g.sms * g.sram_kib / 1024;
    const double sram_tbs = 128 * g.sms * g.clock_ghz * 1e9 / 1e12;
    rows.push_back({g.name, fixed(g.sms, 0) + " x " + fixed(g.sram_kib, 0) + " KiB", fixed(total_mib, 2) + " MiB",
                    fixed(sram_tbs, 1) + " TB/s", fixed(g.hbm_tbs, 3) + " TB/s", fixed(sram_tbs / g.hbm_tbs, 1) + "x",
                    fixed(g.sram_kib * 1024 / 2, 0)});
  }
  return markdown_table({"GPU", "combined L1/shared memory per SM", "total", "its bandwidth (128 B/clock/SM at boost)",
                         "HBM bandwidth", "ratio", "M per SM in fp16 elements"},
                        rows);
}

std::string tile_table() {
  std::vector<std::vector<std::string>> rows;
  for (std::size_t n : {1024UL, 4096UL, 16384UL}) {
    const Inputs in = make_inputs(1, 1, n / 64, 8);  // tile counts depend on n / tile only: scale down
    FlashConfig cfg;
    cfg.block_q = cfg.block_k = 2;  // n / 64 rows in tiles of 2 = the same tile grid as n rows in tiles of 128
    cfg.mask.causal = true;
    const FlashOutput r = ref::flash_attention_forward(in.q, in.k, in.v, cfg);
    const double total = static_cast<double>(r.tiles_computed + r.tiles_skipped);
    rows.push_back({std::to_string(n), std::to_string(r.tiles_computed), std::to_string(r.tiles_skipped),
                    fixed(100.0 * static_cast<double>(r.tiles_skipped) / total, 1) + "%"});
  }
  return markdown_table({"n (tiles of 128 x 128)", "tiles computed", "tiles skipped whole", "share skipped"}, rows);
}

std::string fp8_table() {
  std::vector<std::vector<std::string>> rows;
  for (const bool outlier : {false, true}) {
    Rng rng(22);
    Tensor3 q = rng.normal_tensor(1, 64, 64);
    const Tensor3 k = rng.normal_tensor(1, 64, 64), v = rng.normal_tensor(1, 64, 64);
    if (outlier)
      for (std::size_t c = 0; c < 64; ++c) q(0, 5, c) *= 1e5f;
    const Tensor3 exact = ref::scaled_dot_product_attention(q, k, v, {});
    for (const auto& [name, scaling] : {std::pair<std::string, Fp8Scaling>{"per tensor", Fp8Scaling::per_tensor},
                                        {"per block of 16 rows", Fp8Scaling::per_block}}) {
      FlashConfig cfg;
      cfg.block_q = cfg.block_k = 16;
      cfg.fp8 = scaling;
      const Tensor3 out = ref::flash_attention_forward(q, k, v, cfg).out;
      double sum = 0;  // RMS error over the rows outside the first block
      for (std::size_t i = 16; i < 64; ++i)
        for (std::size_t e = 0; e < 64; ++e) sum += std::pow(static_cast<double>(out(0, i, e)) - exact(0, i, e), 2);
      rows.push_back({outlier ? "query row 5 x 1e5" : "N(0, 1)", name, sci(std::sqrt(sum / (48 * 64)), 3)});
    }
  }
  return markdown_table({"inputs", "E4M3 scaling of Q, K, V", "RMS error vs fp32, rows 16 .. 63"}, rows);
}

// The emulated error of each low-precision format against exact attention, next to the format's
// unit roundoff u: fp16 and bf16 inputs of the two products, and E4M3 with one scale per tensor.
std::string low_precision_table() {
  const Inputs in = make_inputs(32, 2, 256, 64);
  const Tensor3 exact = ref::scaled_dot_product_attention(in.q, in.k, in.v, {});
  struct Row {
    std::string format;
    int mantissa_bits;
    FlashInputs inputs;
    Fp8Scaling fp8;
  };
  const Row formats[] = {{"fp16", 10, FlashInputs::fp16, Fp8Scaling::none},
                         {"bf16", 7, FlashInputs::bf16, Fp8Scaling::none},
                         {"E4M3, one scale per tensor", 3, FlashInputs::fp32, Fp8Scaling::per_tensor}};
  std::vector<std::vector<std::string>> rows;
  for (const Row& f : formats) {
    FlashConfig cfg;
    cfg.block_q = cfg.block_k = 64;
    cfg.inputs = f.inputs;
    cfg.fp8 = f.fp8;
    const Tensor3 out = ref::flash_attention_forward(in.q, in.k, in.v, cfg).out;
    double worst = 0, sum = 0;
    for (std::size_t t = 0; t < out.size(); ++t) {
      const double e = std::fabs(static_cast<double>(out.data()[t]) - exact.data()[t]);
      worst = std::max(worst, e);
      sum += e * e;
    }
    rows.push_back({f.format, std::to_string(f.mantissa_bits), sci(std::ldexp(1.0, -(f.mantissa_bits + 1)), 2),
                    sci(worst, 2), sci(std::sqrt(sum / static_cast<double>(out.size())), 2)});
  }
  return markdown_table({"inputs of QK^T and P~V", "mantissa bits", "unit roundoff u", "max abs error", "RMS error"}, rows);
}

std::string markdown(const GlobalOptions&) {
  std::ostringstream md;
  md << results_header("04_flash_attention", "Chapter 04, flash attention");
  md << "## The documents' numbers and statements\n\n" << checks_markdown(document_checks()) << '\n';
  md << "## The GPUs' memory hierarchy\n\n" << hardware_table()
     << "\nAt most 164 KiB (A100) and 228 KiB (H100) of it can be shared memory. The FlashAttention papers "
        "quote about 19 TB/s for A100 and 31 TB/s for H100; either way on-chip memory is about ten times "
        "faster than HBM, not twenty.\n\n";
  md << "## The IO model\n\n" << io_tables();
  md << "## Causal attention: tiles skipped whole\n\n" << tile_table() << '\n';
  md << "## FP8 (E4M3) emulation\n\n"
        "One head, n = 64, d = 64, seed 22; Q, K, V rounded to E4M3 with one scale per tensor or per "
        "block of 16 rows, the weights P rounded to E4M3 before P V, everything else in double.\n\n"
     << fp8_table() << '\n';
  md << "## 16-bit inputs, as tensor cores take them\n\n"
        "Two heads, n = 256, d = 64, seed 32, tiles of 64 x 64; the products' inputs (Q, K, V and the "
        "weights P~) rounded to each format, everything else in double (the reference's emulation of "
        "`cuda::flash_attention_forward_tensor_core`); errors against exact attention. (With fp32 inputs "
        "nothing is rounded and the emulation is exact attention.)\n\n"
     << low_precision_table() << '\n';
  md << "## Reference vs optimized\n\n" << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// ------------------------------------------------------------------------------------- --step

// Prints one query of head 0 tile by tile; returns its scores s_j (in double, for --dump). The
// query is row 0, or with a mask the last row (under a causal mask row 0 sees one key only); the
// mask's hidden keys score -inf and a key tile it hides entirely is skipped, as the kernels do.
DTensor2 step_through(const Inputs& in, const FlashConfig& cfg) {
  std::ostream& out = std::cout;
  const std::size_t n_q = in.q.shape()[1], n = in.k.shape()[1], d = in.q.shape()[2];  // n: the keys
  const AttentionMask& mask = cfg.mask;
  const std::size_t i = mask.is_none() ? 0 : n_q - 1;
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  constexpr double neg_inf = -std::numeric_limits<double>::infinity();
  out << "Flash attention, head 0, query " << i << " (n_q = " << n_q << ", n_k = " << n << ", d = " << d
      << ", key tiles of " << cfg.block_k << (mask.is_none() ? "" : "; the mask's hidden keys score -inf") << ")\n";
  // s_j = q_i . k_j / sqrt(d) + b_ij where the mask allows key j, -inf where it hides it.
  DTensor2 s = DTensor2::from_shape({1, n});
  for (std::size_t j = 0; j < n; ++j) {
    double dot = 0;
    for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(in.q(0, i, e)) * in.k(0, j, e);
    s(0, j) = mask.allows(i, j, n_q, n) ? scale * dot + mask.score_bias(0, i, j, n_q, n) : neg_inf;
  }
  const std::string name = "q_" + std::to_string(i);
  print_step(out, 1, "the scores s_j = " + name + " . k_j / sqrt(d)" + (mask.is_none() ? "" : " + mask") +
                         " (flash never stores this row; shown for checking)");
  print_matrix(out, "s", s, 4, 16);
  // Online softmax with the output accumulator, one key tile at a time.
  double m = neg_inf, l = 0;
  DTensor2 acc = xt::zeros<double>({std::size_t{1}, in.v.shape()[2]});
  int step = 2;
  for (std::size_t c0 = 0; c0 < n; c0 += cfg.block_k) {
    const std::size_t c1 = std::min(n, c0 + cfg.block_k);
    double tile_max = neg_inf;
    for (std::size_t j = c0; j < c1; ++j) tile_max = std::max(tile_max, s(0, j));
    std::ostringstream title;
    title << "key tile [" << c0 << ", " << c1 << "): ";
    if (tile_max == neg_inf) {  // every key of the tile hidden: nothing to add, the state stays
      title << "every key hidden by the mask, skipped";
      print_step(out, step++, title.str());
      continue;
    }
    const double m_new = std::max(m, tile_max);
    const double correction = std::isinf(m) ? 0.0 : std::exp(m - m_new);
    double tile_sum = 0;
    acc *= correction;
    for (std::size_t j = c0; j < c1; ++j) {
      const double p = std::exp(s(0, j) - m_new);  // 0 for a hidden key
      tile_sum += p;
      for (std::size_t e = 0; e < acc.shape()[1]; ++e) acc(0, e) += p * in.v(0, j, e);
    }
    l = l * correction + tile_sum;
    m = m_new;
    title << "m = max(m, " << fixed(tile_max, 4) << ") = " << fixed(m, 4) << ", old state times e^(m_old - m) = "
          << fixed(correction, 4) << ", l = " << fixed(l, 4);
    print_step(out, step++, title.str());
    print_matrix(out, "O~ (unnormalised)", acc);
  }
  // A row the mask hides entirely gets O = 0 and L = -inf (chapter 00's convention).
  const bool attended = l > 0;
  print_step(out, step++, "O = O~ / l and L = m + ln l = " + (attended ? fixed(m + std::log(l), 6) : std::string("-inf")));
  print_matrix(out, "O", attended ? DTensor2(acc / l) : DTensor2(acc * 0.0));
  const FlashOutput r = ref::flash_attention_forward(in.q, in.k, in.v, cfg);
  print_matrix(out, "ref::flash_attention_forward, row " + std::to_string(i),
               Tensor2(xt::view(r.out, 0, xt::range(i, i + 1), xt::all())));
  print_step(out, step, "the same two numbers from the two-pass softmax: the online version is exact");
  const ref::SoftmaxState whole = ref::online_softmax_update({}, std::span<const float>(Tensor1(xt::cast<float>(xt::view(s, 0, xt::all()))).data(), n));
  out << "  m = " << fixed(whole.max, 4) << ", l = " << fixed(whole.sum, 4) << "\n";
  return s;
}

// ---------------------------------------------------------------------------------------- figure

std::string io_figure() {
  // HBM traffic vs on-chip memory for n = 4096, d = 64: flat for standard, 1/M for flash.
  std::vector<double> standard, flash;
  for (int p = 0; p <= 10; ++p) {
    const std::size_t m = (std::size_t{256} << p);  // 256 .. 262144 floats
    standard.push_back(analysis::standard_attention_io(4096, 64).total() / 1e6);
    flash.push_back(analysis::flash_attention_io(4096, 64, m).total() / 1e6);
  }
  return svg_line_plot({{"standard attention", standard, "#c0392b", false}, {"flash attention", flash, "#1f5fa8", false}},
                       "HBM traffic, n = 4096, d = 64 (one head)", "on-chip memory M = 256 x 2^x floats",
                       "million elements moved (log scale)", true);
}

// ---------------------------------------------------------------------------------------- run

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown(g);
    return 0;
  }
  const char* fn = "04_flash_attention";
  if (!o.svg.empty()) {
    write_svg(o.svg, io_figure());
    std::cout << "wrote " << o.svg << "\n";
    return 0;
  }
  // --load: the sizes are the arrays' (read from the headers only: the run is costed first).
  const Load load(o.load);
  const AttentionSizes sizes = attention_sizes(load, o, {o.heads, o.seq, o.seq_k, o.head_dim});
  const int heads_size = sizes.heads, seq_size = sizes.seq, seq_k_size = sizes.seq_k, head_dim_size = sizes.head_dim;
  require_positive(fn, "--seq", seq_size);
  require_positive(fn, "--head-dim", head_dim_size);
  require_positive(fn, "--heads", heads_size);
  require(seq_k_size >= 0, fn, "--seq-k (", seq_k_size, ") must be >= 0 (0 means --seq)");
  require_positive(fn, "--block-q", o.block_q);
  require_positive(fn, "--block-k", o.block_k);
  const FlashConfig cfg = flash_config(o);
  // What the run will take, before anything is allocated: the inputs q, k, v, dout (and their 16-bit
  // roundings), every backend's output, log-sum-exp and gradients dq, dk, dv; the loop reference's
  // Q K^T, P V and an exponential per score (twice with 16-bit inputs: the fp32 run it is compared
  // with; the backward pass recomputes P and forms dV, dP, dQ, dK: about twice the forward's work).
  const auto heads = static_cast<std::uint64_t>(heads_size), n = static_cast<std::uint64_t>(seq_size),
             n_k = seq_k_size > 0 ? static_cast<std::uint64_t>(seq_k_size) : n,
             d = static_cast<std::uint64_t>(head_dim_size);
  const std::string seq_option = seq_k_size > 0 && n_k > n ? "--seq-k" : "--seq";
  const bool sixteen_bit = cfg.inputs != FlashInputs::fp32;
  RunCost cost;
  const std::uint64_t backends = ch04::backends().size();
  cost.memory("the inputs q, k, v, dout", {sixteen_bit ? 2u : 1u, heads, 2 * n + 2 * n_k, d}, sizeof(float), seq_option)
      .memory("every backend's output, log-sum-exp and dq", {backends + 1, heads, n, 2 * d + 1}, sizeof(float), "--seq")
      .memory("every backend's dk and dv", {backends + 1, heads, n_k, 2 * d}, sizeof(float), seq_option)
      .work("the loop reference's scores, exponentials and P V (forward and backward), and the other backends'",
            {sixteen_bit ? 2u : 3u, heads, n, n_k, 2 * d + kExpCost}, seq_option,
            backends_work_factor(o.backend, backends));
  cost.require_affordable(g, o);
  const Inputs in = command_inputs(g.seed, heads, n, n_k, d, load);
  const ch04::Backend& reference = reference_backend(ch04::backends());
  const double tol = tolerance(in, cfg.inputs);
  Run expected = *run_on(reference, in, cfg, tol);  // validates everything first
  // The gradients, as in the tests: each a sum of up to K = max(d, n_q, n_k) products whose inputs
  // (out, lse) carry float rounding; rtol = 10 eps sqrt(K) relative to the largest gradient, and
  // ten times that absolute (dS = P (dP - D) cancels): 11 rtol max(1, max|g|) in all.
  for (Output& grad : expected.outputs)
    if (grad.name == "dq" || grad.name == "dk" || grad.name == "dv") {
      const Tensor3& g_ref = std::get<Tensor3>(grad.value);
      grad.tolerance = 11 * reduction_rtol(std::max({d, n, n_k})) *
                       std::max(1.0, static_cast<double>(xt::amax(xt::abs(g_ref))()));
    }
  // The step-through follows the algorithm on fp32 inputs (with --inputs, the rounding is reported below).
  FlashConfig fp32_cfg = cfg;
  fp32_cfg.inputs = FlashInputs::fp32;
  DTensor2 step_scores;
  if (o.step) step_scores = step_through(in, fp32_cfg);
  Dump dump(o.dump);
  dump.write("q", in.q);
  dump.write("k", in.k);
  dump.write("v", in.v);
  dump.write("dout", in.dout);
  if (o.step) dump.write_double("step_scores", step_scores);  // query 0's scores, in double
  // What rounding the inputs costs: the emulation against the same attention on fp32 inputs.
  const bool low_precision = cfg.inputs != FlashInputs::fp32;
  const double rounding_error =
      low_precision ? max_abs_difference(std::get<Tensor3>(output_named(expected, "flash_attention_forward").value),
                                         reference.flash_forward(in.q, in.k, in.v, fp32_cfg).out)
                    : 0.0;
  const bool json = g.format == "json";
  RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                   "flash attention forward and backward: heads " + std::to_string(heads) + ", seq " +
                       std::to_string(n) + (n_k != n ? ", seq_k " + std::to_string(n_k) : "") + ", head_dim " +
                       std::to_string(d) + ", " + describe(cfg.mask) + ", tiles " +
                       std::to_string(o.block_q) + " x " + std::to_string(o.block_k) + ", seed " +
                       std::to_string(g.seed) + (low_precision ? ", " + o.inputs + " inputs" : ""),
                   {{"heads", heads}, {"seq", n}, {"seq_k", n_k}, {"head_dim", d}, {"mask", describe(cfg.mask)},
                    {"block_q", o.block_q}, {"block_k", o.block_k}, {"inputs", o.inputs}},
                   json};
  if (low_precision) {
    report.parameters.push_back({"rounding_error_vs_fp32_inputs", rounding_error});
    if (!json)
      std::cout << "\nrounding the inputs to " << o.inputs << " moves ref's output by " << sci(rounding_error, 2)
                << " against fp32 inputs\n";
  }
  return run_backends(ch04::backends(), o.backend,
                      [&](const ch04::Backend& b) { return run_on(b, in, cfg, tol); }, expected, dump, report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "flash";
  c.summary = "online softmax, flash attention forward and backward, the IO model, fp16/bf16 and FP8 emulation";
  c.figures.push_back({"docs/figures/ch04_io_model.svg", "flash"});
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "flash", "Chapter 04: flash attention, tile by tile", *o,
        "print query 0's online softmax one key tile at a time: m, l and the rescaled output accumulator",
        "write q.npy, k.npy, v.npy, dout.npy (the upstream gradient), flash_attention_forward_<backend>.npy, "
        "lse_<backend>.npy, the gradients dq_<backend>.npy, dk_<backend>.npy, dv_<backend>.npy and, with --step, "
        "step_scores.npy (float64) to DIR",
        backend_lines(ch04::backends()), [o, &global] { return run(*o, global); });
    sub.option("--seq", o->seq, "sequence length n (queries)");
    sub.option("--seq-k", o->seq_k, "number of keys (default: --seq)", ShowDefault::no);
    sub.option("--head-dim", o->head_dim, "head dimension d");
    sub.option("--heads", o->heads, "number of heads");
    sub.option("--block-q", o->block_q, "query rows per tile (B_r)");
    sub.option("--block-k", o->block_k, "key rows per tile (B_c)");
    add_mask_options(sub, o->mask);  // whole key tiles the mask hides are skipped
    sub.choice("--inputs", o->inputs, {"fp32", "fp16", "bf16"},
               "format of the products' inputs: fp32, or fp16 / bf16 as tensor cores take them (ref emulates, "
               "cuda runs the tensor-core kernel: tiles must be multiples of 16)");
    sub.option("--svg", o->svg, "draw HBM traffic against on-chip memory (standard vs flash) into FILE", ShowDefault::no);
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

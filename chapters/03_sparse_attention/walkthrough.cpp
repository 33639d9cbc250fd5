// `tvlab 03_sparse_attention` (alias `tvlab sparse`): attention over a sparse pattern. The
// command builds one of the chapter's patterns (or reads a block layout from a file), prints it
// with --step, runs every backend of the registry on it (the block-sparse attention over the
// pattern's block layout, and the sliding-window attention when the pattern is a window) against
// the reference, draws the patterns side by side (--svg), and writes results.md (--markdown):
// the documents' numbers, the cost model and the receptive fields.

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <sstream>

#include "../common/backend_run.hpp"
#include "../common/npy_load.hpp"
#include "../common/run_cost.hpp"
#include "../common/svg.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/analysis/receptive_field.hpp"
#include "tvlab/analysis/sparse_cost.hpp"
#include "tvlab/core/attention_patterns.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/sparse_attention.hpp"

namespace tvlab::cli {
namespace {

constexpr const char* kCommand = TVLAB_CHAPTER_NAME;

struct Options : StandardOptions {
  std::string pattern = "window";  // window | dilated | strided | fixed | longformer | bigbird | full | layout
  int heads = 2, seq = 32, head_dim = 8;
  int window = 3;                  // w: the window's radius (keys i - w .. i + w; i - w .. i with --causal)
  std::string dilation = "2";      // dilated: one dilation, or one per head ("1,2")
  int stride = 4;                  // l: strided's stride, fixed's block
  int summary = 1;                 // c: fixed's summary columns per block
  std::string globals = "0";       // longformer: the global positions
  int block = 8;                   // the layout's blocks (BigBird's block b)
  int global_blocks = 2;           // BigBird's g
  int random_blocks = 1;           // BigBird's r
  bool causal = false;             // window, dilated, longformer, full: keys j <= i only
  bool factorized = false;         // strided, fixed: head h takes A^(1) or A^(2) (h even or odd)
  std::string layout;              // --layout FILE: a block layout drawn with '#' and '.'
  int row = -1;                    // --step: the row worked through (-1: the middle one)
  std::string svg;                 // --svg FILE: the patterns side by side
};

const std::vector<std::string> kPatterns = {"window", "dilated", "strided", "fixed", "longformer", "bigbird", "full",
                                            "layout"};

// ------------------------------------------------------------------------------ the pattern

// What the options ask for, checked (every bad value names its option) before anything is built.
struct PatternChoice {
  std::string name;
  std::size_t n = 0, heads = 1, window = 0, stride = 1, summary = 1, block = 1, global_blocks = 0, random_blocks = 0;
  std::vector<std::size_t> dilations, globals;
  bool causal = false, factorized = false;
  std::uint64_t seed = 0;
  BlockLayout layout;  // --pattern layout: the file's layout
};

// A list of non-negative whole numbers, "0,11,20" (empty: none). Throws naming `option`.
std::vector<std::size_t> parse_list(const std::string& option, const std::string& text) {
  std::vector<std::size_t> values;
  if (text.empty()) return values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    require(!item.empty() && item.find_first_not_of("0123456789") == std::string::npos, kCommand, option, ": '", text,
            "' must be a comma-separated list of whole numbers >= 0 (e.g. 0,11)");
    require(item.size() <= 18, kCommand, option, ": ", item, " is too large");
    values.push_back(static_cast<std::size_t>(std::stoull(item)));
  }
  require(text.back() != ',', kCommand, option, ": '", text, "' ends with a comma");
  return values;
}

// Reads a block layout drawn as text: one line per query block, one character per key block,
// '#' computed and '.' skipped (what --step prints, without its '+' for partial blocks: a block
// of a user's layout is computed whole). Its shape must be ceil(n / b) x ceil(n / b).
BlockLayout read_layout(const std::string& path, std::size_t n, std::size_t b) {
  std::ifstream file(path);
  require(file.good(), kCommand, "--layout: cannot read '", path, "'");
  const std::size_t blocks = (n + b - 1) / b;
  BlockLayout layout;
  layout.seq_q = layout.seq_k = n;
  layout.block_q = layout.block_k = b;
  layout.block_start.push_back(0);
  std::string line;
  std::size_t lines = 0;
  while (std::getline(file, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++lines;
    require(lines <= blocks, kCommand, "--layout: '", path, "' has more than ", blocks, " lines; --seq ", n,
            " in blocks of --block ", b, " makes ", blocks, " query blocks");
    require(line.size() == blocks, kCommand, "--layout: line ", lines, " of '", path, "' has ", line.size(),
            " characters, expected ", blocks, " (one per key block of --block ", b, ")");
    for (std::size_t c = 0; c < blocks; ++c) {
      require(line[c] == '#' || line[c] == '.', kCommand, "--layout: line ", lines, " of '", path,
              "' holds '", line[c], "' at column ", c + 1, "; use '#' (computed) and '.' (skipped)");
      if (line[c] == '#') {
        layout.key_blocks.push_back(static_cast<std::uint32_t>(c));
        layout.partial.push_back(-1);  // a full block
      }
    }
    layout.block_start.push_back(layout.key_blocks.size());
  }
  require(lines == blocks, kCommand, "--layout: '", path, "' has ", lines, " lines, expected ", blocks,
          " (one per query block: --seq ", n, " in blocks of --block ", b, ")");
  return layout;
}

PatternChoice choose_pattern(const Options& o, const GlobalOptions& g, std::size_t heads, std::size_t n) {
  PatternChoice p;
  p.name = o.pattern;
  if (!o.layout.empty() && !o.given("--pattern")) p.name = "layout";
  require(std::find(kPatterns.begin(), kPatterns.end(), p.name) != kPatterns.end(), kCommand, "--pattern ('", p.name,
          "') must be one of window, dilated, strided, fixed, longformer, bigbird, full, layout");
  p.n = n;
  p.heads = heads;
  p.causal = o.causal;
  p.factorized = o.factorized;
  p.seed = g.seed;
  require(o.window >= 0, kCommand, "--window (", o.window, ") must be >= 0");
  require_positive(kCommand, "--block", o.block);
  p.window = static_cast<std::size_t>(o.window);
  p.block = static_cast<std::size_t>(o.block);
  if (p.name == "dilated") {
    p.dilations = parse_list("--dilation", o.dilation);
    require(!p.dilations.empty(), kCommand, "--dilation: give one dilation, or one per head (e.g. 1,2)");
    require(p.dilations.size() == 1 || p.dilations.size() == heads, kCommand, "--dilation: ", p.dilations.size(),
            " dilations for ", heads, " heads; give one, or one per head");
    for (std::size_t d : p.dilations) require(d >= 1, kCommand, "--dilation: every dilation must be >= 1 (got ", d, ")");
  }
  if (p.name == "strided" || p.name == "fixed") {
    require_positive(kCommand, "--stride", o.stride);
    p.stride = static_cast<std::size_t>(o.stride);
    if (p.name == "fixed") {
      require(o.summary >= 1 && o.summary <= o.stride, kCommand, "--summary (", o.summary,
              ") must be between 1 and --stride (", o.stride, "): the last c positions of each block of l");
      p.summary = static_cast<std::size_t>(o.summary);
    }
  }
  if (p.name == "longformer") {
    p.globals = parse_list("--globals", o.globals);
    for (std::size_t gpos : p.globals)
      require(gpos < n, kCommand, "--globals: position ", gpos, " is outside the sequence (--seq ", n, ")");
  }
  if (p.name == "bigbird") {
    require(o.global_blocks >= 0, kCommand, "--global-blocks (", o.global_blocks, ") must be >= 0");
    require(o.random_blocks >= 0, kCommand, "--random-blocks (", o.random_blocks, ") must be >= 0");
    require(n % p.block == 0, kCommand, "--seq (", n, ") must be a multiple of --block (", p.block,
            ") for --pattern bigbird: BigBird works in whole blocks");
    require(!o.causal, kCommand, "--causal: BigBird's pattern (ITC) is bidirectional; drop --causal");
    const std::size_t blocks = n / p.block;
    p.global_blocks = static_cast<std::size_t>(o.global_blocks);
    p.random_blocks = static_cast<std::size_t>(o.random_blocks);
    require(p.global_blocks <= blocks, kCommand, "--global-blocks (", p.global_blocks, ") exceeds the ", blocks,
            " blocks of --seq ", n, " in blocks of --block ", p.block);
    // A query block that is neither global nor at an edge has 3 window blocks and g global ones.
    const std::size_t taken = std::min(blocks, 3 + p.global_blocks);
    require(p.random_blocks <= blocks - taken, kCommand, "--random-blocks (", p.random_blocks, ") exceeds the ",
            blocks - taken, " blocks a query block can draw from (", blocks, " blocks, less its 3-block window and ",
            p.global_blocks, " global ones)");
  }
  if (p.name == "layout") {
    require(!o.layout.empty(), kCommand, "--layout: --pattern layout reads its blocks from --layout FILE");
    require(!o.causal, kCommand, "--causal: a layout from --layout is used as drawn; drop --causal");
  } else {
    require(o.layout.empty(), kCommand, "--layout is read with --pattern layout (not --pattern ", p.name, ")");
  }
  return p;
}

// An upper bound on |S_i| for any row, from the pattern's parameters alone: the run is costed
// before the pattern is built.
std::uint64_t keys_per_row_bound(const PatternChoice& p) {
  const std::uint64_t n = p.n, w = p.window, b = p.block;
  std::uint64_t keys = n;
  if (p.name == "window") keys = (p.causal ? 1 : 2) * w + 1;
  if (p.name == "dilated") keys = 2 * w + 1;
  if (p.name == "strided") keys = p.stride + n / p.stride + 1;
  if (p.name == "fixed") keys = p.stride + (n / p.stride + 1) * p.summary;
  if (p.name == "longformer") keys = 2 * w + 1 + p.globals.size();
  if (p.name == "bigbird") keys = (3 + p.global_blocks + p.random_blocks) * b;
  return std::min(keys, n);  // global rows, and any pattern, are at most full
}

// The partial blocks of `to_block_layout(pattern, b, b)`, counted without building it (each will
// hold a b x b mask): a block is partial when it holds some but not all of its pairs.
std::uint64_t partial_block_count(const SparsePattern& pattern, std::size_t b) {
  const std::size_t key_blocks = (pattern.seq_k + b - 1) / b;
  std::vector<std::size_t> pairs_in(key_blocks, 0);
  std::vector<std::size_t> touched;
  std::uint64_t partial = 0;
  for (std::size_t r0 = 0; r0 < pattern.seq_q; r0 += b) {
    const std::size_t r1 = std::min(pattern.seq_q, r0 + b);
    for (std::size_t e = pattern.row_start[r0]; e < pattern.row_start[r1]; ++e)
      if (pairs_in[pattern.keys[e] / b]++ == 0) touched.push_back(pattern.keys[e] / b);
    for (std::size_t kb : touched) {
      const std::size_t columns = std::min(pattern.seq_k, (kb + 1) * b) - kb * b;
      if (pairs_in[kb] != (r1 - r0) * columns) ++partial;
      pairs_in[kb] = 0;
    }
    touched.clear();
  }
  return partial;
}

// The patterns of the heads: one shared by every head, or one per head (several dilations, the
// Sparse Transformer's factorisation).
HeadPatterns build_patterns(const PatternChoice& p) {
  const std::size_t n = p.n;
  if (p.name == "window") return {sliding_window_pattern(n, p.window, p.causal ? 0 : p.window)};
  if (p.name == "full") return {full_pattern(n, p.causal)};
  if (p.name == "longformer") return {longformer_pattern(n, p.window, p.globals, p.causal)};
  if (p.name == "bigbird") return {bigbird_pattern(n, p.block, p.global_blocks, p.random_blocks, p.seed)};
  if (p.name == "layout") return {to_pattern(p.layout)};
  HeadPatterns patterns;
  if (p.name == "dilated") {
    for (std::size_t d : p.dilations) patterns.push_back(dilated_window_pattern(n, p.window, d, p.causal));
    return patterns;
  }
  // strided, fixed: the union in every head, or head h takes A^(1) (h even) or A^(2) (h odd).
  const auto one = [&](int head) {
    return p.name == "strided" ? strided_pattern(n, p.stride, head) : fixed_pattern(n, p.stride, p.summary, head);
  };
  if (!p.factorized) return {one(2)};
  for (std::size_t h = 0; h < p.heads; ++h) patterns.push_back(one(static_cast<int>(h % 2)));
  return patterns;
}

std::string describe(const PatternChoice& p) {
  std::ostringstream s;
  const char* side = p.causal ? ", causal" : "";
  if (p.name == "window") s << "sliding window, radius " << p.window << side;
  if (p.name == "full") s << "full attention" << side;
  if (p.name == "dilated") {
    s << "dilated window, radius " << p.window << ", dilation ";
    for (std::size_t i = 0; i < p.dilations.size(); ++i) s << (i ? "," : "") << p.dilations[i];
    s << side;
  }
  if (p.name == "strided") s << "strided, stride " << p.stride << (p.factorized ? ", factorized" : ", union");
  if (p.name == "fixed")
    s << "fixed, block " << p.stride << ", summary " << p.summary << (p.factorized ? ", factorized" : ", union");
  if (p.name == "longformer") {
    s << "longformer, radius " << p.window << ", globals {";
    for (std::size_t i = 0; i < p.globals.size(); ++i) s << (i ? "," : "") << p.globals[i];
    s << "}" << side;
  }
  if (p.name == "bigbird")
    s << "bigbird, block " << p.block << ", " << p.global_blocks << " global and " << p.random_blocks
      << " random blocks, seed " << p.seed;
  if (p.name == "layout") s << "block layout from a file, blocks of " << p.block;
  return s.str();
}

// ------------------------------------------------------------------------------ running the backends

struct Inputs {
  Tensor3 q, k, v;
};

Inputs make_inputs(std::uint64_t seed, std::size_t heads, std::size_t n, std::size_t d) {
  Rng rng(seed);
  Inputs in;
  in.q = rng.normal_tensor(heads, n, d);
  in.k = rng.normal_tensor(heads, n, d);
  in.v = rng.normal_tensor(heads, n, d);
  return in;
}

// As chapter 04: a score is a length-d dot product of size about sqrt(d) after the scale, an
// output a weighted sum of at most n values (tvlab::attention_tolerance).
double tolerance(const Inputs& in) {
  const std::size_t d = in.q.shape()[2], n = in.k.shape()[1];
  const double v_max = static_cast<double>(xt::amax(xt::abs(in.v))());
  return tvlab::attention_tolerance(d, n, std::sqrt(static_cast<double>(d)), v_max);
}

// The functions one backend provides on these inputs: the block-sparse attention over the
// layouts, and the sliding-window attention when the pattern is a window.
std::optional<Run> run_on(const sparse::Backend& b, const Inputs& in, const HeadLayouts& layouts,
                          const std::optional<SlidingWindow>& window, double tol) {
  const bool block_sparse = static_cast<bool>(b.block_sparse), sliding = window && b.sliding_window;
  if (!block_sparse && !sliding) return std::nullopt;
  Run run;
  if (block_sparse) {
    const FlashOutput r = b.block_sparse(in.q, in.k, in.v, layouts, {});
    run.outputs.push_back({"block_sparse_attention", r.out, tol});
    run.details = {{"tiles_computed", r.tiles_computed}, {"tiles_skipped", r.tiles_skipped}};
    run.note = "blocks computed " + std::to_string(r.tiles_computed) + ", skipped " + std::to_string(r.tiles_skipped);
  }
  if (sliding) run.outputs.push_back({"sliding_window_attention", b.sliding_window(in.q, in.k, in.v, *window, {}).out, tol});
  return run;
}

// ------------------------------------------------------------------------------ agreement

// The chapter's documented examples: each pattern at a size with partial blocks and rows of
// different lengths, against chapter 00's attention with the pattern as its boolean mask (the
// reference's meaning) and every headline backend against the reference. results.md must not
// depend on the machine: CUDA only in the tour, when a device is present.
std::vector<Agreement> agreements(bool include_cuda) {
  std::vector<Agreement> out;
  struct Example {
    std::string name;
    SparsePattern pattern;
    std::optional<SlidingWindow> window;  // the same pattern as a window, for sliding_window_attention
    std::size_t heads, head_dim, block;
  };
  const std::size_t n = 100;
  const Example examples[] = {
      {"window w = 5, n = 100, blocks of 16", sliding_window_pattern(n, 5, 5), SlidingWindow{5, 5}, 2, 16, 16},
      {"causal window w = 20, n = 100, blocks of 16", sliding_window_pattern(n, 20, 0), SlidingWindow{20, 0}, 2, 16, 16},
      {"dilated w = 3, dilation 4, n = 100", dilated_window_pattern(n, 3, 4, false), std::nullopt, 2, 16, 16},
      {"strided l = 10, n = 100", strided_pattern(n, 10, 2), std::nullopt, 2, 16, 16},
      {"fixed l = 10, c = 2, n = 100", fixed_pattern(n, 10, 2, 2), std::nullopt, 2, 16, 16},
      {"longformer w = 4, globals {0, 50, 99}, n = 100", longformer_pattern(n, 4, {0, 50, 99}, false), std::nullopt,
       2, 16, 16},
      {"bigbird b = 10, g = 2, r = 2, n = 100", bigbird_pattern(n, 10, 2, 2, 3), std::nullopt, 2, 16, 10},
      {"window w = 64, n = 512, d = 64, blocks of 64", sliding_window_pattern(512, 64, 64), SlidingWindow{64, 64}, 4,
       64, 64},
  };
  for (const Example& e : examples) {
    const std::size_t len = e.pattern.seq_q;
    const Inputs in = make_inputs(11, e.heads, len, e.head_dim);
    const double tol = tolerance(in);
    const FlashOutput r = ref::sparse_attention(in.q, in.k, in.v, {e.pattern});
    AttentionConfig masked;
    masked.mask.allowed = e.pattern.to_mask();
    out.push_back({"sparse_attention vs chapter 00 attention with the mask", "ref", e.name,
                   max_abs_difference(r.out, ref::scaled_dot_product_attention(in.q, in.k, in.v, masked)), tol});
    const HeadLayouts layouts{to_block_layout(e.pattern, e.block, e.block)};
    for (const auto& b : headline_backends(sparse::backends(), include_cuda)) {
      if (b.block_sparse)
        out.push_back({"block_sparse_attention", b.name, e.name,
                       max_abs_difference(b.block_sparse(in.q, in.k, in.v, layouts, {}).out, r.out), tol});
      if (b.sliding_window && e.window)
        out.push_back({"sliding_window_attention", b.name, e.name,
                       max_abs_difference(b.sliding_window(in.q, in.k, in.v, *e.window, {}).out, r.out), tol});
    }
  }
  return out;
}

// ------------------------------------------------------------------------------ receptive field

// The inputs that reach output `position` through `layers`: how many, and their first and last.
struct Reach {
  std::size_t count = 0, first = 0, last = 0;
};

Reach reach_of(const std::vector<SparsePattern>& layers, std::size_t position) {
  const std::vector<bool> set = analysis::receptive_field(layers, position);
  Reach r;
  for (std::size_t j = 0; j < set.size(); ++j)
    if (set[j]) {
      if (r.count++ == 0) r.first = j;
      r.last = j;
    }
  return r;
}

std::string reach_text(const Reach& r) {
  return std::to_string(r.count) + " (" + std::to_string(r.first) + ".." + std::to_string(r.last) + ")";
}

// The receptive field of L stacked layers of each kind, from the composed patterns.
std::string receptive_field_table() {
  const std::size_t n = 1024, w = 16, middle = 512, last = n - 1;
  const SparsePattern causal = sliding_window_pattern(n, w, 0), both = sliding_window_pattern(n, w, w),
                      dilated = dilated_window_pattern(n, 4, 4, false), plain = sliding_window_pattern(n, 4, 4),
                      longformer = longformer_pattern(n, w, {0}, false);
  std::vector<std::vector<std::string>> rows;
  for (const std::size_t layers : {1UL, 2UL, 3UL, 4UL, 8UL, 16UL}) {
    std::vector<SparsePattern> mixed;  // dilation 4, then 1, then 4, ...
    for (std::size_t l = 0; l < layers; ++l) mixed.push_back(l % 2 == 0 ? dilated : plain);
    rows.push_back({std::to_string(layers), std::to_string(layers * w),
                    reach_text(reach_of(std::vector<SparsePattern>(layers, causal), last)),
                    reach_text(reach_of(std::vector<SparsePattern>(layers, both), middle)),
                    reach_text(reach_of(std::vector<SparsePattern>(layers, dilated), middle)),
                    reach_text(reach_of(mixed, middle)),
                    reach_text(reach_of(std::vector<SparsePattern>(layers, longformer), middle))});
  }
  std::ostringstream md;
  md << "The input positions that can influence one output position after L layers (`analysis::receptive_field` "
        "on the composed patterns, n = 1024): how many, and the first and last of them.\n\n"
     << markdown_table({"L", "L w", "causal window w = 16, position 1023", "window radius 16, position 512",
                        "dilated radius 4, dilation 4, position 512", "dilation 4 and 1 alternating, position 512",
                        "Longformer radius 16, global 0, position 512"},
                       rows)
     << "\nA window moves information w positions a layer: L w back (and ahead), every position in between. "
        "The dilated window (radius 4, 9 keys) reaches 16 positions a layer, as far as the window of radius 16 "
        "with 33 keys, but only every 4th position: 8 L + 1 positions, the holes never fill. Alternating it with "
        "a plain window of radius 4 fills them. One global position connects everything in two layers.\n\n";
  return md.str();
}

// ------------------------------------------------------------------------------ cost model

// Pairs, FLOPs and stored scores of each pattern at the first document's size, n = 8192, d = 64,
// one head, against dense attention.
std::string cost_table() {
  const std::size_t n = 8192, d = 64, w = 512;
  struct Row {
    std::string name;
    std::function<SparsePattern()> build;
    std::size_t row;  // a row far from the edges and the global positions
    bool causal;      // compared with causal dense attention too
  };
  const Row patterns[] = {
      {"sliding window, radius 512 (2w + 1 = 1025 keys)", [&] { return sliding_window_pattern(n, w, w); }, 4096, false},
      {"causal window, 512 back (w + 1 keys)", [&] { return sliding_window_pattern(n, w, 0); }, 4096, true},
      {"dilated window, radius 256, dilation 2", [&] { return dilated_window_pattern(n, 256, 2, false); }, 4096, false},
      {"Longformer, radius 512, globals {0, 1000, 3000, 6000}",
       [&] { return longformer_pattern(n, w, {0, 1000, 3000, 6000}, false); }, 5000, false},
      {"BigBird ITC, b = 64, g = 2, r = 3", [&] { return bigbird_pattern(n, 64, 2, 3, 1); }, 4096, false},
      {"Sparse Transformer strided, l = 91 (about sqrt n)", [&] { return strided_pattern(n, 91, 2); }, 4096, true},
      {"Sparse Transformer fixed, l = 128, c = 8", [&] { return fixed_pattern(n, 128, 8, 2); }, 4096, true},
  };
  std::vector<std::vector<std::string>> rows;
  const auto row_of = [&](const std::string& name, const std::string& keys, const analysis::SparseAttentionCost& c,
                          bool causal) {
    return std::vector<std::string>{name,
                                    keys,
                                    fixed(c.attended_pairs, 0),
                                    fixed(100 * c.density(), 2) + "%",
                                    fixed(c.flops() / 1e9, 2),
                                    fixed(c.score_bytes / (1 << 20), 1),
                                    fixed(c.compute_saving(), 2) + "x",
                                    causal ? fixed(c.saving_vs_causal(), 2) + "x" : "—"};
  };
  // Dense attention is a window at least as wide as the sequence (no pattern built).
  rows.push_back(row_of("dense", std::to_string(n), analysis::sliding_window_cost(n, n, n, 1, d), false));
  rows.push_back(row_of("dense, causal", "i + 1", analysis::sliding_window_cost(n, n, 0, 1, d), true));
  for (const Row& r : patterns) {
    const SparsePattern p = r.build();
    rows.push_back(row_of(r.name, std::to_string(p.row_size(r.row)) + " (row " + std::to_string(r.row) + ")",
                          analysis::sparse_attention_cost(p, 1, d), r.causal));
  }
  std::ostringstream md;
  md << "n = 8192, one head, d = 64. A pair is one score computed and stored: the FLOPs are 2d for q . k and 2d "
        "for the weighted value, 4d per pair; a stored float32 score matrix holds 4 bytes per pair. So every "
        "column saves the same factor.\n\n"
     << markdown_table({"pattern", "keys of one row", "attended pairs", "of n^2", "GFLOP (QK^T and PV)",
                        "scores stored (MiB)", "saving vs dense", "vs causal dense"},
                       rows)
     << "\n(`analysis::sparse_attention_cost`; the dense rows from `analysis::sliding_window_cost` with a window "
        "as wide as the sequence.) A causal pattern is fairly compared with causal dense attention, which a "
        "flash kernel also computes at half the price: the causal window of 512 saves 16.5x against dense "
        "attention but 8.2x against causal attention.\n\n";
  return md.str();
}

// ------------------------------------------------------------------------------ the documents

DocumentCheck statement(std::string source, std::string quantity, std::string says, std::string computed, bool agrees) {
  return {std::move(source), std::move(quantity), std::move(says), std::move(computed), agrees};
}

// The keys of row i as "a..b" when they are one range, else their count.
std::string keys_text(const SparsePattern& p, std::size_t i) {
  const std::size_t count = p.row_size(i);
  if (count == 0) return "no key";
  const std::uint32_t first = p.keys[p.row_start[i]], last = p.keys[p.row_start[i + 1] - 1];
  if (last - first + 1 == count) return std::to_string(first) + ".." + std::to_string(last);
  return std::to_string(count) + " keys from " + std::to_string(first) + " to " + std::to_string(last);
}

std::vector<DocumentCheck> document_checks() {
  std::vector<DocumentCheck> c;
  const double mb = 8192.0 * 8192.0 * 4 / 1e6;
  c.push_back(check_number("003 §3.1", "one float32 score matrix, n = 8192", "about 268 MB", 268, 1, mb,
                           fixed(mb, 1) + " MB (" + fixed(mb * 1e6 / (1 << 20), 0) + " MiB)"));
  c.push_back(statement("003 §3.1", "what holds that matrix", "one layer (单层)",
                        "one head: a layer of 32 heads holds 32 of them, " + fixed(32 * mb / 1e3, 2) + " GB", false));
  const SparsePattern small = sliding_window_pattern(16, 3, 3);
  c.push_back(check_number("000 L21", "keys of position 5 in a window of w = 3", "positions 2 to 8: 2w + 1 = 7", 7, 1,
                           static_cast<double>(small.row_size(5)),
                           keys_text(small, 5) + ", " + std::to_string(small.row_size(5)) + " keys"));
  // n = 8192, w = 512: one score computed and one stored per attended pair.
  const std::size_t n = 8192, w = 512;
  const SparsePattern window = sliding_window_pattern(n, w, w);
  const analysis::SparseAttentionCost cost = analysis::sparse_attention_cost(window, 1, 64);
  const std::string pairs = fixed(cost.attended_pairs, 0) + " of " + fixed(cost.dense_pairs, 0) + " pairs: ";
  c.push_back(check_number("000 L21", "compute saved by a window of w = 512, n = 8192", "about 16x", 16, 1,
                           cost.compute_saving(),
                           pairs + fixed(cost.compute_saving(), 2) + "x (16x would be w keys per row, not 2w + 1)"));
  c.push_back(check_number("000 L21", "storage saved by the same window", "about 8x", 8, 1, cost.storage_saving(),
                           pairs + fixed(cost.storage_saving(), 2) + "x, the same factor as the compute"));
  const SparsePattern twice = sliding_window_pattern(2 * n, w, w);
  c.push_back(statement("000 L77", "cost of sparse attention", "still O(n^2)",
                        "O(nw): " + std::to_string(window.pairs()) + " pairs at n = 8192, " +
                            std::to_string(twice.pairs()) + " at 16384 (x" +
                            fixed(static_cast<double>(twice.pairs()) / static_cast<double>(window.pairs()), 3) +
                            " for 2n: linear)",
                        false));
  // Mistral 7B: 32 layers of a causal window reaching W back (positions i - W .. i). The closed form
  // at W = 4096, and the composed patterns of 32 layers at W = 64 (n = 32 x 64 + 1), which must agree.
  const std::size_t layers = 32, small_w = 64, output = layers * small_w;
  const Reach composed =
      reach_of(std::vector<SparsePattern>(layers, sliding_window_pattern(output + 1, small_w, 0)), output);
  const analysis::WindowField mistral = analysis::stacked_window_field(layers * 4096 + 1, layers, 4096, 0, 1, layers * 4096);
  c.push_back(check_number("000 L23", "receptive field of 32 layers with a window of W = 4096", "32 x 4096 = 131072 tokens",
                           131072, 1, static_cast<double>(mistral.reach_back),
                           std::to_string(mistral.reach_back) + " positions back (`stacked_window_field`; the 32 "
                           "composed patterns at W = 64 reach " + std::to_string(output - composed.first) +
                           " = 32 x 64), with the paper's window i - W .. i; " +
                           std::to_string(analysis::stacked_window_field(layers * 4096 + 1, layers, 4095, 0, 1,
                                                                         layers * 4096).reach_back) +
                           " with W keys (i - W < j <= i); an upper bound on the reach"));
  // The sentence of 000 L25: "小明" and "第一个" twenty-odd words apart, w = 8.
  c.push_back(statement("000 L25", "layers of w = 8 windows between words twenty-odd positions apart",
                        "a chain of 5 hops (第一个 -> 学生 -> ... -> 小明)",
                        std::to_string(analysis::layers_to_travel(20, 8)) + " layers for 20 positions, " +
                            std::to_string(analysis::layers_to_travel(29, 8)) +
                            " for 29 (ceil(distance / w)): the chain is one possible path, not the fewest layers",
                        true));

  // Longformer, the first document's example: n = 8192, w = 512, global positions 0, 1000, 3000, 6000.
  const SparsePattern longformer = longformer_pattern(n, w, {0, 1000, 3000, 6000}, false);
  const std::size_t row = 5000;
  std::size_t window_keys = 0, first = n, last = 0;
  for (std::size_t e = longformer.row_start[row]; e < longformer.row_start[row + 1]; ++e) {
    const std::size_t j = longformer.keys[e];
    if (j + w < row || j > row + w) continue;  // a global key
    ++window_keys;
    first = std::min(first, j);
    last = std::max(last, j);
  }
  c.push_back(check_number("000 L31", "Longformer, position 5000: its window and the global keys",
                           "positions 4488 to 5512, and the 4 titles", 1029, 1,
                           static_cast<double>(longformer.row_size(row)),
                           std::to_string(first) + ".." + std::to_string(last) + " (" + std::to_string(window_keys) +
                               " keys) and " + std::to_string(longformer.row_size(row) - window_keys) + " global: " +
                               std::to_string(longformer.row_size(row)) + " keys"));
  c.push_back(check_number("000 L31", "Longformer, position 3000 (a global one)", "attends to every position", 8192, 1,
                           static_cast<double>(longformer.row_size(3000)),
                           std::to_string(longformer.row_size(3000)) + " keys"));
  const std::vector<std::size_t> steps = analysis::hops(longformer, 5000);
  const std::size_t farthest = *std::max_element(steps.begin(), steps.end());
  c.push_back(statement("000 L27", "steps between ordinary tokens through global tokens", "often only two",
                        "at most " + std::to_string(farthest) + " from any position to position 5000 (`hops`); " +
                            std::to_string(analysis::layers_to_travel(5000, static_cast<long long>(w))) +
                            " layers of the window alone from position 0",
                        farthest <= 2));
  c.push_back(statement("000 L33", "16K tokens against the original 512-1024", "10-30x",
                        fixed(16384.0 / 1024, 0) + "x to " + fixed(16384.0 / 512, 0) +
                            "x (and 512 is BERT's limit, 1024 GPT-2's: the 2017 Transformer fixed none)",
                        false));
  // Longformer's own window of 512 is the whole window, 256 on each side (Beltagy et al., §3.1).
  const SparsePattern paper = longformer_pattern(n, w / 2, {0, 1000, 3000, 6000}, false);
  c.push_back(statement("000 L31, 004 L80", "Longformer's window of 512 as a radius",
                        "position 5000 attends to 4488..5512 (w = 512 on each side)",
                        "Longformer's w = 512 is the whole window, w/2 = 256 a side: " + keys_text(window, 5000) +
                            " is the document's reading, " + std::to_string(paper.row_size(row) - 4) +
                            " window keys (4744..5256) Longformer's",
                        false));
  const double bound = static_cast<double>(n) * (2 * w + 1) + 2.0 * n * 4;
  c.push_back(statement("000 L27, 004 L80", "cost of window + global attention", "O(nw + ng)",
                        std::to_string(longformer.pairs()) + " pairs <= n(2w + 1) + 2ng = " + fixed(bound, 0) +
                            " (g global rows and g global columns)",
                        static_cast<double>(longformer.pairs()) <= bound));
  // The Sparse Transformer at n = 4096, l = sqrt(n) = 64: each pattern's longest row.
  const SparsePattern strided = strided_pattern(4096, 64, 2), fixed_union = fixed_pattern(4096, 64, 1, 2);
  std::size_t strided_max = 0, fixed_max = 0;
  for (std::size_t i = 0; i < 4096; ++i) {
    strided_max = std::max(strided_max, strided.row_size(i));
    fixed_max = std::max(fixed_max, fixed_union.row_size(i));
  }
  c.push_back(statement("004 L76", "keys per query of the strided and fixed patterns (n = 4096, l = 64, c = 1)",
                        "about 2 sqrt(n) = 128 each, O(n sqrt(n)) in all",
                        "at most " + std::to_string(strided_max) + " (strided) and " + std::to_string(fixed_max) +
                            " (fixed); " + std::to_string(strided.pairs()) + " and " +
                            std::to_string(fixed_union.pairs()) + " pairs, against n sqrt(n) = 262144",
                        strided_max <= 128 && fixed_max <= 128));
  c.push_back(statement("004 L76", "the strided pattern's keys", "i - 1, ..., i - k and i - l, i - 2l, ...",
                        "with k = l - 1 this is Child et al.'s A(1) u A(2) without i itself, which both of their "
                        "sets (and every implementation) contain",
                        false));
  // How many layers of the strided pattern connect the last position to every earlier one.
  const Reach one = reach_of({strided}, 4095), two = reach_of({strided, strided}, 4095);
  c.push_back(statement("004 L76", "hops the strided pattern needs to cover the text (n = 4096, l = 64)",
                        "a logarithmic number of hops",
                        "2: position 4095 is reached from " + std::to_string(one.count) + " positions through one "
                            "layer and from all " + std::to_string(two.count) + " through two (back by multiples "
                            "of l, then within l)",
                        false));
  c.push_back(statement("004 L76", "the fixed pattern's key set",
                        "{j : floor(j / sqrt n) = b} u {j : j mod sqrt n = i mod sqrt n, j < i}",
                        "the query's block up to i, and the last c positions of every block (summary columns); the "
                        "document's second set is the strided pattern's, and its first is not causal",
                        false));
  // Random blocks as expander links: 256 blocks of one position, the longest shortest path to block 0.
  std::string longest;
  for (const std::size_t r : {0UL, 1UL, 2UL, 3UL}) {
    const std::vector<std::size_t> d = analysis::hops(bigbird_pattern(256, 1, 0, r, 11), 0);
    longest += (r ? ", " : "") + std::to_string(*std::max_element(d.begin(), d.end())) + " (r = " + std::to_string(r) + ")";
  }
  c.push_back(statement("004 L84", "random links make the graph an expander: information mixes fast",
                        "random connections are the key", "the longest path to a position over 256, a 3-position "
                        "window and r random positions per row (seed 11): " + longest,
                        true));
  const SparsePattern bigbird = bigbird_pattern(4096, 64, 2, 3, 1);
  c.push_back(statement("004 L84", "keys per query of BigBird", "w + r + g",
                        "(3 + r + g) b = " + std::to_string(bigbird.row_size(2048)) +
                            " for b = 64, r = 3, g = 2 (row 2048 of 4096): the three terms count blocks",
                        bigbird.row_size(2048) == (3 + 3 + 2) * 64));
  return c;
}

// ------------------------------------------------------------------------------ --markdown

std::string markdown() {
  std::ostringstream md;
  md << results_header(TVLAB_CHAPTER_NAME, "Chapter 03, sparse attention");
  md << "## The documents' numbers and statements\n\n" << checks_markdown(document_checks()) << '\n';
  md << "## The cost model\n\n" << cost_table();
  md << "## The receptive field of stacked layers\n\n" << receptive_field_table();
  md << "## Reference vs chapter 00, and the optimized kernels vs the reference\n\n"
     << "Seed 11, inputs N(0, 1); the tolerance is chapter 00's bound for float attention "
        "(`attention_tolerance`).\n\n"
     << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// ------------------------------------------------------------------------------ --step

// The layout as a grid of blocks: '#' full, '+' partial, '.' empty.
std::string layout_grid(const BlockLayout& layout) {
  std::ostringstream out;
  for (std::size_t qb = 0; qb < layout.query_blocks(); ++qb) {
    std::string line(layout.key_block_count(), '.');
    for (std::size_t e = layout.block_start[qb]; e < layout.block_start[qb + 1]; ++e)
      line[layout.key_blocks[e]] = layout.partial[e] < 0 ? '#' : '+';
    out << "  " << line << '\n';
  }
  return out.str();
}

// Prints the pattern of head 0, its layout, the keys per row, and row `row` of head 0 worked
// through; returns that row's scores over its keys (in double, for --dump).
DTensor2 step_through(const PatternChoice& choice, const HeadPatterns& patterns, const HeadLayouts& layouts,
                      const Inputs& in, std::size_t row) {
  std::ostream& out = std::cout;
  const SparsePattern& p = patterns[0];
  const BlockLayout& layout = layouts[0];
  const std::size_t n = p.seq_q, d = in.q.shape()[2];
  out << "Sparse attention: " << describe(choice) << ", n = " << n << (patterns.size() > 1 ? " (head 0 shown)" : "")
      << "\n";
  print_step(out, 1, "the pattern: row i marks the keys S_i of query i with #");
  if (n <= 64) {
    std::istringstream grid(pattern_grid(p));
    std::string line;
    while (std::getline(grid, line)) out << "  " << line << '\n';
  } else {
    out << "  " << pattern_grid(p);
  }
  const double dense = static_cast<double>(n) * static_cast<double>(n);
  out << "  " << p.pairs() << " attended pairs of " << n * n << " (" << fixed(100 * p.pairs() / dense, 1)
      << "%)\n";
  for (std::size_t h = 1; h < patterns.size(); ++h)
    out << "  head " << h << ": its own pattern, " << patterns[h].pairs() << " pairs\n";
  print_step(out, 2, "the block layout, blocks of " + std::to_string(layout.block_q) + ": # full, + partial, . skipped");
  if (layout.query_blocks() <= 64) out << layout_grid(layout);
  const double touched = static_cast<double>(layout.blocks()) * static_cast<double>(layout.block_q * layout.block_k);
  out << "  " << layout.blocks() << " of " << layout.query_blocks() * layout.key_block_count() << " blocks computed ("
      << layout.partial_blocks() << " partial); they hold " << layout.blocks() * layout.block_q * layout.block_k
      << " entries, " << fixed(touched > 0 ? 100 * p.pairs() / touched : 0.0, 1) << "% of them attended\n";
  print_step(out, 3, "the keys per row |S_i|");
  std::size_t lo = n, hi = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lo = std::min(lo, p.row_size(i));
    hi = std::max(hi, p.row_size(i));
  }
  if (n <= 64) {
    for (std::size_t i = 0; i < n; i += 16) {
      out << "  rows " << i << "-" << std::min(n, i + 16) - 1 << ":";
      for (std::size_t r = i; r < std::min(n, i + 16); ++r) out << ' ' << p.row_size(r);
      out << '\n';
    }
  }
  out << "  from " << lo << " to " << hi << " keys, " << fixed(static_cast<double>(p.pairs()) / static_cast<double>(n), 2)
      << " on average (dense: " << n << ")\n";
  // One row, step by step: s_j over S_i, m, the weights, the output.
  const std::uint32_t* keys = p.keys.data() + p.row_start[row];
  const std::size_t count = p.row_size(row);
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  std::ostringstream title;
  title << "row i = " << row << " of head 0: its " << count << " keys S_i = {";
  for (std::size_t e = 0; e < count; ++e) {
    if (e == 12 && count > 14) {
      title << ", ..., " << keys[count - 1];
      break;
    }
    title << (e ? ", " : "") << keys[e];
  }
  title << "}";
  print_step(out, 4, title.str());
  DTensor2 s = DTensor2::from_shape({1, count});
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t e = 0; e < count; ++e) {
    double dot = 0;
    for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(in.q(0, row, c)) * in.k(0, keys[e], c);
    s(0, e) = scale * dot;
    m = std::max(m, s(0, e));
  }
  if (count == 0) {
    out << "  no key: the output row is 0 (a fully masked row, as in chapter 00)\n";
    return s;
  }
  print_matrix(out, "s_j = q_i . k_j / sqrt(d), j in S_i (no other score is computed)", s, 4, 16);
  double l = 0;
  for (std::size_t e = 0; e < count; ++e) l += std::exp(s(0, e) - m);
  DTensor2 weights = DTensor2::from_shape({1, count});
  for (std::size_t e = 0; e < count; ++e) weights(0, e) = std::exp(s(0, e) - m) / l;
  print_step(out, 5, "p_j = e^(s_j - m) / l over S_i only: m = " + fixed(m, 4) + ", l = " + fixed(l, 4));
  print_matrix(out, "p", weights, 4, 16);
  DTensor2 o = xt::zeros<double>({std::size_t{1}, in.v.shape()[2]});
  for (std::size_t e = 0; e < count; ++e)
    for (std::size_t c = 0; c < o.shape()[1]; ++c) o(0, c) += weights(0, e) * in.v(0, keys[e], c);
  print_step(out, 6, "o_i = sum_j p_j v_j");
  print_matrix(out, "o", o);
  const FlashOutput r = ref::sparse_attention(xt::view(in.q, xt::range(0, 1), xt::all(), xt::all()),
                                              xt::view(in.k, xt::range(0, 1), xt::all(), xt::all()),
                                              xt::view(in.v, xt::range(0, 1), xt::all(), xt::all()), {p});
  print_matrix(out, "ref::sparse_attention, the same row", Tensor2(xt::view(r.out, 0, xt::range(row, row + 1), xt::all())));
  return s;
}

// ------------------------------------------------------------------------------ --svg

// What put a pair in a pattern, for the figure's colours.
enum class Part { local, global, random, second };

struct Panel {
  std::string title;
  SparsePattern pattern;
  std::function<Part(std::size_t i, std::size_t j)> part;
};

std::string number(double v) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << v;
  return s.str();
}

// The patterns of the chapter side by side at n = 32, each pair coloured by what put it there:
// the window or the query's own block, global positions, BigBird's random blocks, the second
// head of the Sparse Transformer's factorisation. Runs of equal cells in a row are one rectangle,
// so the file stays small.
std::string patterns_figure(std::uint64_t seed) {
  const std::size_t n = 32;
  const std::vector<std::size_t> globals{0, 20};
  const std::size_t bb = 4;  // BigBird's block
  const auto block_of = [bb](std::size_t i) { return i / bb; };
  const std::size_t blocks = n / bb;
  const auto bigbird_global = [&](std::size_t blk) { return blk == 0 || blk == blocks - 1; };
  const auto in = [](const std::vector<std::size_t>& set, std::size_t x) {
    return std::find(set.begin(), set.end(), x) != set.end();
  };
  const SparsePattern strided_first = strided_pattern(n, 6, 0), fixed_first = fixed_pattern(n, 8, 2, 0);
  std::vector<Panel> panels = {
      {"full, causal", full_pattern(n, true), [](std::size_t, std::size_t) { return Part::local; }},
      {"window, w = 3", sliding_window_pattern(n, 3, 3), [](std::size_t, std::size_t) { return Part::local; }},
      {"causal window, w = 3", sliding_window_pattern(n, 3, 0), [](std::size_t, std::size_t) { return Part::local; }},
      {"dilated, w = 2, dilation 3", dilated_window_pattern(n, 2, 3, false),
       [](std::size_t, std::size_t) { return Part::local; }},
      {"strided, l = 6 (2 heads)", strided_pattern(n, 6, 2),
       [&](std::size_t i, std::size_t j) { return strided_first.allows(i, j) ? Part::local : Part::second; }},
      {"fixed, l = 8, c = 2 (2 heads)", fixed_pattern(n, 8, 2, 2),
       [&](std::size_t i, std::size_t j) { return fixed_first.allows(i, j) ? Part::local : Part::second; }},
      {"Longformer, w = 2, G = {0, 20}", longformer_pattern(n, 2, globals, false),
       [&](std::size_t i, std::size_t j) { return in(globals, i) || in(globals, j) ? Part::global : Part::local; }},
      {"BigBird, b = 4, g = 2, r = 1", bigbird_pattern(n, bb, 2, 1, seed),
       [&](std::size_t i, std::size_t j) {
         if (bigbird_global(block_of(i)) || bigbird_global(block_of(j))) return Part::global;
         const std::size_t bi = block_of(i), bj = block_of(j);
         return (bi > bj ? bi - bj : bj - bi) <= 1 ? Part::local : Part::random;
       }},
  };
  const char* colours[] = {"#1f5fa8", "#c0392b", "#e08a1e", "#2e9c5a"};
  const double cell = 5, side = cell * n, gap = 34, left = 20, top = 48, columns = 4;
  const double width = left + columns * (side + gap), rows = std::ceil(panels.size() / columns);
  const double height = top + rows * (side + gap + 14) + 40;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << number(width) << "\" height=\"" << number(height)
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"24\" font-size=\"14\">Sparse attention patterns, n = 32: row i = query, "
       "column j = key (tvlab sparse --svg)</text>\n";
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const Panel& panel = panels[p];
    const double x0 = left + static_cast<double>(p % 4) * (side + gap),
                 y0 = top + static_cast<double>(p / 4) * (side + gap + 14);
    s << "<text x=\"" << number(x0) << "\" y=\"" << number(y0 + 8) << "\">" << panel.title << "</text>\n"
      << "<rect x=\"" << number(x0) << "\" y=\"" << number(y0 + 14) << "\" width=\"" << number(side) << "\" height=\""
      << number(side) << "\" fill=\"#f2f2f2\" stroke=\"#999999\"/>\n";
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t j = 0;
      while (j < n) {
        if (!panel.pattern.allows(i, j)) {
          ++j;
          continue;
        }
        const Part part = panel.part(i, j);
        std::size_t end = j + 1;
        while (end < n && panel.pattern.allows(i, end) && panel.part(i, end) == part) ++end;
        s << "<rect x=\"" << number(x0 + cell * static_cast<double>(j)) << "\" y=\""
          << number(y0 + 14 + cell * static_cast<double>(i)) << "\" width=\"" << number(cell * static_cast<double>(end - j))
          << "\" height=\"" << number(cell) << "\" fill=\"" << colours[static_cast<int>(part)] << "\"/>\n";
        j = end;
      }
    }
    s << "<text x=\"" << number(x0) << "\" y=\"" << number(y0 + 14 + side + 13) << "\" fill=\"#555555\">"
      << panel.pattern.pairs() << " of " << n * n << " pairs</text>\n";
  }
  const char* names[] = {"window / own block / first head", "global positions (full rows and columns)",
                         "BigBird's random blocks", "second head (every l-th back; summary columns)"};
  for (int c = 0; c < 4; ++c) {  // the legend, two entries a line
    const double x = left + (c % 2) * 2 * (side + gap), y = height - 40 + (c / 2) * 18;
    s << "<rect x=\"" << number(x) << "\" y=\"" << number(y) << "\" width=\"10\" height=\"10\" fill=\"" << colours[c]
      << "\"/>\n<text x=\"" << number(x + 14) << "\" y=\"" << number(y + 9) << "\">" << names[c] << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

// ------------------------------------------------------------------------------ run

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown();
    return 0;
  }
  if (!o.svg.empty()) {
    write_svg(o.svg, patterns_figure(g.seed));
    std::cout << "wrote " << o.svg << "\n";
    return 0;
  }
  // --load: the sizes are q.npy's (its header only: the run is costed first); k.npy and v.npy must
  // have the same shape (self-attention), which reading them checks.
  const Load load(o.load);
  int heads_size = o.heads, seq_size = o.seq, head_dim_size = o.head_dim;
  if (load.enabled()) {
    const auto shape = load.shape("q", 3, "[heads, seq, head_dim]");
    heads_size = size_from_load(o, "--heads", o.heads, shape[0], "q.npy's dimension 0 (heads)");
    seq_size = size_from_load(o, "--seq", o.seq, shape[1], "q.npy's dimension 1 (seq)");
    head_dim_size = size_from_load(o, "--head-dim", o.head_dim, shape[2], "q.npy's dimension 2 (head_dim)");
  }
  require_positive(kCommand, "--heads", heads_size);
  require_positive(kCommand, "--seq", seq_size);
  require_positive(kCommand, "--head-dim", head_dim_size);
  const auto heads = static_cast<std::size_t>(heads_size), n = static_cast<std::size_t>(seq_size),
             d = static_cast<std::size_t>(head_dim_size);
  PatternChoice choice = choose_pattern(o, g, heads, n);
  require(o.row >= -1 && o.row < seq_size, kCommand, "--row (", o.row, ") must be a row of the sequence, 0 to ",
          seq_size - 1);
  // What the run will take, before anything is allocated: the patterns (4 bytes a key), q, k, v
  // and two outputs per backend; the loop reference's scores, weights and weighted sums (an
  // exponential per weight and value). The layouts' masks are counted once the patterns exist.
  const std::uint64_t rows_keys = keys_per_row_bound(choice);
  const std::uint64_t pattern_count = choice.name == "dilated" || choice.factorized ? heads : 1;
  const std::uint64_t backends = sparse::backends().size();
  RunCost cost;
  cost.memory("the patterns' keys", {pattern_count, n, rows_keys}, sizeof(std::uint32_t), "--seq")
      .memory("q, k, v and two outputs per backend", {2 * backends + 3, heads, n, d}, sizeof(float), "--seq")
      .work("the loop reference's scores, weights and weighted sums, for the two functions",
            {2, heads, n, rows_keys, d * (1 + kExpCost) + d}, "--seq", backends_work_factor(o.backend, backends));
  cost.require_affordable(g, o);
  if (choice.name == "layout") choice.layout = read_layout(o.layout, n, choice.block);
  const HeadPatterns patterns = build_patterns(choice);
  std::uint64_t partial_blocks = 0;
  for (const SparsePattern& p : patterns) partial_blocks += partial_block_count(p, choice.block);
  RunCost masks;
  masks.memory("the block layouts' masks", {partial_blocks, choice.block, choice.block}, 1, "--block");
  masks.require_affordable(g, o);
  const HeadLayouts layouts = to_block_layouts(patterns, choice.block, choice.block);
  std::optional<SlidingWindow> window;
  if (choice.name == "window") {
    const auto w = static_cast<long long>(choice.window);
    window = SlidingWindow{w, choice.causal ? 0 : w};
  }
  const Inputs in = load.enabled() ? Inputs{load.tensor3("q", {heads, n, d}, "[heads, seq, head_dim]"),
                                            load.tensor3("k", {heads, n, d}, "[heads, seq, head_dim] (those of q.npy)"),
                                            load.tensor3("v", {heads, n, d}, "[heads, seq, head_dim] (those of q.npy)")}
                                   : make_inputs(g.seed, heads, n, d);
  const double tol = tolerance(in);
  const Run expected = *run_on(reference_backend(sparse::backends()), in, layouts, window, tol);  // validates first
  DTensor2 step_scores;
  if (o.step) step_scores = step_through(choice, patterns, layouts, in, o.row >= 0 ? static_cast<std::size_t>(o.row) : n / 2);
  Dump dump(o.dump);
  dump.write("q", in.q);
  dump.write("k", in.k);
  dump.write("v", in.v);
  if (o.step) dump.write_double("step_scores", step_scores);
  std::size_t pairs = 0;
  for (std::size_t h = 0; h < heads; ++h) pairs += pattern_of_head(patterns, h).pairs();
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         "sparse attention: " + describe(choice) + "; heads " + std::to_string(heads) + ", seq " +
                             std::to_string(n) + ", head_dim " + std::to_string(d) + ", blocks of " +
                             std::to_string(choice.block) + "; " + std::to_string(pairs) + " attended pairs of " +
                             std::to_string(heads * n * n),
                         {{"pattern", choice.name}, {"description", describe(choice)}, {"heads", heads}, {"seq", n},
                          {"head_dim", d}, {"block", choice.block}, {"attended_pairs", pairs},
                          {"dense_pairs", heads * n * n}},
                         g.format == "json"};
  return run_backends(sparse::backends(), o.backend,
                      [&](const sparse::Backend& b) { return run_on(b, in, layouts, window, tol); }, expected, dump,
                      report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "sparse";
  c.summary = "sparse attention: sliding and dilated windows, strided and fixed, Longformer, BigBird, block-sparse kernels";
  c.figures.push_back({"docs/figures/ch03_patterns.svg", "sparse"});
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "sparse", "Chapter 03: sparse attention", *o,
        "print the pattern as a grid, its block layout, the keys per row, and one row's attention step by step",
        "write q.npy, k.npy, v.npy, block_sparse_attention_<backend>.npy, sliding_window_attention_<backend>.npy "
        "(window patterns) and, with --step, step_scores.npy (the row's scores, float64) to DIR",
        backend_lines(sparse::backends()), [o, &global] { return run(*o, global); });
    sub.choice("--pattern", o->pattern, kPatterns,
               "the pattern: window, dilated, strided, fixed, longformer, bigbird, full, or layout (--layout FILE)");
    sub.option("--heads", o->heads, "attention heads");
    sub.option("--seq", o->seq, "sequence length n");
    sub.option("--head-dim", o->head_dim, "head dimension d");
    sub.option("--window", o->window, "window radius w: keys i - w .. i + w (i - w .. i with --causal)");
    sub.option("--dilation", o->dilation, "dilated: the dilation, or one per head (e.g. 1,2)");
    sub.option("--stride", o->stride, "strided: the stride l; fixed: the block l");
    sub.option("--summary", o->summary, "fixed: the summary columns c at the end of each block");
    sub.option("--globals", o->globals, "longformer: the global positions (e.g. 0,11)");
    sub.option("--block", o->block, "block size of the layout (query and key blocks); BigBird's block b");
    sub.option("--global-blocks", o->global_blocks, "bigbird: global blocks g (the first and last ones)");
    sub.option("--random-blocks", o->random_blocks, "bigbird: random key blocks r per query block");
    sub.flag("--causal", o->causal, "window, dilated, longformer, full: keys j <= i only");
    sub.flag("--factorized", o->factorized, "strided, fixed: head h takes A(1) (h even) or A(2) (h odd), not their union");
    sub.option("--layout", o->layout, "read a block layout from FILE: one line per query block, '#' computed, '.' skipped",
               ShowDefault::no);
    sub.option("--row", o->row, "--step: the row worked through (default: the middle one)", ShowDefault::no);
    sub.option("--svg", o->svg, "draw the patterns side by side into FILE", ShowDefault::no);
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

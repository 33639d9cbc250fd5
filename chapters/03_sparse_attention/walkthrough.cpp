// `tvlab 03_sparse_attention` (alias `tvlab sparse`): attention over a sparse pattern. Every
// backend of the registry runs the sliding-window attention and the block-sparse attention over
// the window's block layout, against the reference.

#include <iostream>
#include <sstream>

#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/core/attention_patterns.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::cli {
namespace {

struct Options : StandardOptions {
  int heads = 2, seq = 40, head_dim = 8, window = 4, block = 8;
};

std::string markdown() {
  std::ostringstream md;
  md << results_header(TVLAB_CHAPTER_NAME, "Sparse attention");
  return md.str();
}

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown();
    return 0;
  }
  require_positive(TVLAB_CHAPTER_NAME, "--heads", o.heads);
  require_positive(TVLAB_CHAPTER_NAME, "--seq", o.seq);
  require_positive(TVLAB_CHAPTER_NAME, "--head-dim", o.head_dim);
  require(o.window >= 0, TVLAB_CHAPTER_NAME, "--window (", o.window, ") must be >= 0");
  require_positive(TVLAB_CHAPTER_NAME, "--block", o.block);
  const auto heads = static_cast<std::uint64_t>(o.heads), seq = static_cast<std::uint64_t>(o.seq),
             d = static_cast<std::uint64_t>(o.head_dim), w = static_cast<std::uint64_t>(o.window);
  RunCost cost;
  cost.memory("q, k, v and two outputs per backend", {2 * sparse::backends().size() + 3, heads, seq, d},
              sizeof(float), "--seq")
      .work("the loop reference's products", {2, heads, seq, 2 * w + 1, d}, "--seq");
  cost.require_affordable(g);
  const auto n = static_cast<std::size_t>(o.seq), window = static_cast<std::size_t>(o.window);
  Rng rng(g.seed);
  const Tensor3 q = rng.normal_tensor(heads, n, d), k = rng.normal_tensor(heads, n, d),
                v = rng.normal_tensor(heads, n, d);
  const SlidingWindow sliding{static_cast<long long>(window), static_cast<long long>(window)};
  const HeadLayouts layouts{to_block_layout(sliding_window_pattern(n, window, window),
                                            static_cast<std::size_t>(o.block), static_cast<std::size_t>(o.block))};
  const auto run_one = [&](const sparse::Backend& b) -> std::optional<Run> {
    if (!b.sliding_window && !b.block_sparse) return std::nullopt;
    Run run;
    // Outputs are convex combinations of v's rows, |v| ~ 4: a few float roundings per product.
    if (b.sliding_window) run.outputs.push_back({"sliding_window_attention", b.sliding_window(q, k, v, sliding, {}).out, 1e-5});
    if (b.block_sparse) run.outputs.push_back({"block_sparse_attention", b.block_sparse(q, k, v, layouts, {}).out, 1e-5});
    return run;
  };
  const Run expected = *run_one(reference_backend(sparse::backends()));
  Dump dump(o.dump);
  dump.write("q", q);
  dump.write("k", k);
  dump.write("v", v);
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         "sparse attention: heads " + std::to_string(o.heads) + ", seq " + std::to_string(o.seq) +
                             ", head_dim " + std::to_string(o.head_dim) + ", window " + std::to_string(o.window),
                         {{"heads", o.heads}, {"seq", o.seq}, {"head_dim", o.head_dim}, {"window", o.window},
                          {"block", o.block}},
                         g.format == "json"};
  return run_backends(sparse::backends(), o.backend, run_one, expected, dump, report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "sparse";
  c.summary = "sparse attention: sliding windows, Longformer, BigBird, block-sparse kernels";
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "sparse", "Sparse attention", *o,
        "print the pattern and every step of one row", "write q, k, v and each backend's outputs to DIR",
        backend_lines(sparse::backends()), [o, &global] { return run(*o, global); });
    sub.option("--heads", o->heads, "attention heads");
    sub.option("--seq", o->seq, "sequence length n");
    sub.option("--head-dim", o->head_dim, "head dimension d");
    sub.option("--window", o->window, "window radius w: keys i - w .. i + w");
    sub.option("--block", o->block, "block size of the layout (query and key blocks)");
  };
  c.tour = [](const GlobalOptions&) { return TourReport{}; };
  return c;
}

}  // namespace tvlab::cli

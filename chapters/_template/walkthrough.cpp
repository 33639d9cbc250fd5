// `tvlab NN_<topic>` (alias `tvlab example`): the template chapter's command. Its example is the
// row softmax: --step walks one row through the formula, --backend runs the registry, --markdown
// prints results.md, and `tvlab tour` checks its agreement and its document numbers.

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::cli {
namespace {

struct Options : StandardOptions {
  int rows = 3, cols = 5;
};

// A document's worked number, recomputed: softmax([1, 2, 3]) has first weight
// e^1 / (e^1 + e^2 + e^3) = 0.0900.
std::vector<DocumentCheck> document_checks() {
  const Tensor2 x = {{1.0f, 2.0f, 3.0f}};
  const Tensor2 p = reference_backend(example::backends()).softmax(x);
  return {check_number("example", "first weight of softmax([1, 2, 3])", "0.090", 0.090, 0.001, p(0, 0), fixed(p(0, 0), 4))};
}

// Every non-reference backend that can run here against the reference, on fixed inputs.
std::vector<Agreement> agreements(bool include_cuda) {
  Rng rng(7);
  const Tensor2 x = rng.normal_matrix(16, 33, 0.0, 3.0);
  const auto& reference = reference_backend(example::backends());
  const Tensor2 expected = reference.softmax(x);
  std::vector<Agreement> out;
  for (const auto& b : example::backends()) {
    if (b.kind == BackendKind::reference || b.kind == BackendKind::student) continue;
    if (b.kind == BackendKind::cuda && !include_cuda) continue;  // results.md must not depend on the machine
    Agreement a{"softmax", b.name, "16 x 33, N(0, 9)", 0.0, 1e-6};
    if (unavailable_reason(b.caps))
      a.skipped = true;
    else
      a.max_abs_error = max_abs_difference(b.softmax(x), expected);
    out.push_back(a);
  }
  return out;
}

std::string markdown() {
  std::ostringstream md;
  md << results_header(TVLAB_CHAPTER_NAME, "The template chapter");
  md << "## The documents' numbers\n\n" << checks_markdown(document_checks()) << '\n';
  md << "## Reference vs optimized\n\n" << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// Row 0 step by step, in double: the maximum, the exponentials, their sum, the weights.
void step_through(const Tensor2& x) {
  const std::size_t n = x.shape()[1];
  print_step(std::cout, 1, "the logits x of row 0");
  print_matrix(std::cout, "x", Tensor2(xt::view(x, xt::range(0, 1), xt::all())));
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(x(0, j)));
  print_step(std::cout, 2, "the maximum m = " + fixed(m, 4) + " (subtracted so no exponent is positive)");
  DTensor2 e = xt::zeros<double>({std::size_t{1}, n});
  double l = 0.0;
  for (std::size_t j = 0; j < n; ++j) l += e(0, j) = std::exp(x(0, j) - m);
  print_step(std::cout, 3, "e_j = exp(x_j - m), their sum l = " + fixed(l, 4));
  print_matrix(std::cout, "e", e);
  print_step(std::cout, 4, "the weights p_j = e_j / l");
  print_matrix(std::cout, "p", DTensor2(e / l));
}

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown();
    return 0;
  }
  require_positive(TVLAB_CHAPTER_NAME, "--rows", o.rows);
  require_positive(TVLAB_CHAPTER_NAME, "--cols", o.cols);
  // What the run will take, before anything is allocated (refused with one line naming the option
  // when it does not fit): the input and every backend's output; the loop reference's work.
  const auto rows = static_cast<std::uint64_t>(o.rows), cols = static_cast<std::uint64_t>(o.cols);
  RunCost cost;
  cost.memory("the input and every backend's output", {example::backends().size() + 1, rows, cols}, sizeof(float),
              "--cols")
      .work("the loop reference's exponentials", {rows, cols}, "--cols");
  cost.require_affordable(g, o);
  Rng rng(g.seed);
  const Tensor2 x = rng.normal_matrix(static_cast<std::size_t>(o.rows), static_cast<std::size_t>(o.cols), 0.0, 3.0);
  const auto run_one = [&](const example::Backend& b) -> std::optional<Run> {
    if (!b.softmax) return std::nullopt;
    Run run;
    run.outputs.push_back({"softmax", b.softmax(x), 1e-6});  // weights in [0, 1]: a few float roundings
    return run;
  };
  // The reference first: it validates the inputs, so --step never prints an invalid case.
  const Run expected = *run_one(reference_backend(example::backends()));
  if (o.step) step_through(x);
  Dump dump(o.dump);
  dump.write("x", x);
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         "softmax: rows " + std::to_string(o.rows) + ", cols " + std::to_string(o.cols) + ", seed " +
                             std::to_string(g.seed),
                         {{"rows", o.rows}, {"cols", o.cols}},
                         g.format == "json"};
  return run_backends(example::backends(), o.backend, run_one, expected, dump, report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "example";
  c.summary = "the template chapter: its example is the row softmax";
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(root, global, TVLAB_CHAPTER_NAME, "example", "The template chapter: the row softmax, step by step", *o,
        "print every intermediate state of row 0 (max, exponentials, sum, weights)",
        "write x.npy and softmax_<backend>.npy to DIR", backend_lines(example::backends()),
        [o, &global] { return run(*o, global); });
    sub.option("--rows", o->rows, "rows of logits");
    sub.option("--cols", o->cols, "logits per row");
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

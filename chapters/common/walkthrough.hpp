#pragma once
/// @file
/// What every chapter's walkthrough (`tvlab NN_<topic>`) shares: global options, the chapter
/// registry, the tour report, the document-number checks, printing and dumping helpers.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/command.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cli {

/// Options on the root command, valid before or after the chapter's name.
struct GlobalOptions {
  std::uint64_t seed = 42;
  std::string format = "text";        ///< text | markdown | json
  int threads = 0;                    ///< 0 = OpenMP's default
  std::uint64_t max_memory_bytes = 0;  ///< --max-memory; 0 = the memory available when the run starts
  double time_limit = 60;             ///< --time-limit: seconds of loop code a run may need (RunCost)
};

/// One worked number of the documents, recomputed: `agrees` false means an erratum.
struct DocumentCheck {
  std::string source;          ///< "000 L13"
  std::string quantity;        ///< "S and A, n = 8192, fp16, one head"
  std::string document_says;   ///< "268 MB"
  std::string computed;        ///< "268.4 MB (256.0 MiB)"
  bool agrees = true;
};

/// Agreement of one backend with the reference on one documented example.
struct Agreement {
  std::string function, backend, example;
  double max_abs_error = 0.0;
  double tolerance = 0.0;
  bool skipped = false;  ///< backend unavailable (no CUDA device)
  bool ok() const { return skipped || max_abs_error <= tolerance; }
};

struct TourReport {
  std::vector<Agreement> agreements;
  std::vector<DocumentCheck> checks;
  bool all_agree() const;
};

/// A figure of the lesson: `tvlab <command> --svg <file>` makes it (CI regenerates and compares it).
struct Figure {
  std::string file;     ///< "docs/figures/ch00_causal_attention.svg"
  std::string command;  ///< "attention --causal --seq 8 --head-dim 4 --heads 1 --backend ref"
};

struct Chapter {
  std::string name;     ///< "00_attention_basics" (TVLAB_CHAPTER_NAME, the folder's name)
  std::string alias;    ///< "attention"
  std::string summary;  ///< one line for `tvlab list`
  std::vector<Figure> figures;  ///< the lesson's figures, listed by `tvlab list --figures`
  /// Adds the chapter's subcommand to the root command (add_chapter_command, then its own options).
  std::function<void(CommandLine& root, GlobalOptions& global)> add_subcommand;
  /// Runs the documented examples (deterministic) for `tvlab tour`.
  std::function<TourReport(const GlobalOptions& global)> tour;
};

const std::vector<Chapter>& chapters();

/// The options every chapter command has. (`--json` and `--markdown` are other names of the
/// one output switch, `--format json|markdown`: a chapter reads `GlobalOptions::format` only.)
struct StandardOptions {
  bool step = false;      ///< --step
  std::string backend = "all";
  std::string dump;       ///< --dump DIR
  std::string load;       ///< --load DIR: the inputs from DIR/<name>.npy instead of the seeded generator
  /// Whether an option was given on the command line (set by add_chapter_command): a size option
  /// given with --load must agree with the loaded arrays.
  std::function<bool(const std::string&)> given;
  bool json = false;      ///< --json (checked against --format and --markdown, then folded into it)
  bool markdown = false;  ///< --markdown
};

/// One line per entry of a backend registry, for `--backend list`: name, kind, what it needs.
struct BackendLine {
  std::string name;
  BackendKind kind;
  Capabilities caps;
};

/// The lines of `tvlab <chapter> --backend list` for any chapter's registry.
template <class Backend>
std::vector<BackendLine> backend_lines(const std::vector<Backend>& all) {
  std::vector<BackendLine> lines;
  for (const auto& b : all) lines.push_back({b.name, b.kind, b.caps});
  return lines;
}

/// Prints the registry: one backend a line (name, kind, capabilities, whether it can run here).
void print_backend_list(std::ostream& out, const std::vector<BackendLine>& lines);

/// Adds `tvlab <name>` (and its alias) with the standard options; `step_help` and `dump_help`
/// say what --step prints and what --dump writes, `backends` are the chapter's registry
/// (printed by `--backend list`). `run` returns the exit status (non-zero when an
/// implementation disagrees). The chapter adds its own size options to the returned command.
Command add_chapter_command(CommandLine& root, GlobalOptions& global, const std::string& name, const std::string& alias,
                            const std::string& description, StandardOptions& standard, const std::string& step_help,
                            const std::string& dump_help, std::vector<BackendLine> backends, std::function<int()> run);

// ------------------------------------------------------------------------------------- helpers


/// A labelled matrix, aligned, for a projector; larger than `max_show` rows/cols is elided.
void print_matrix(std::ostream& out, const std::string& label, const DTensor2& m, int precision = 4,
                  std::size_t max_show = 8);
void print_matrix(std::ostream& out, const std::string& label, const Tensor2& m, int precision = 4,
                  std::size_t max_show = 8);
/// "--- Step 3: the row maximum ---------------------------------"
void print_step(std::ostream& out, int number, const std::string& title);

/// Markdown table from a header and rows.
std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
/// Formats with a fixed number of significant digits ("1.340e+12", "0.6490").
std::string sci(double value, int digits = 4);
std::string fixed(double value, int decimals = 4);

/// The agreements and document checks as Markdown (used by every chapter's results.md).
std::string agreements_markdown(const std::vector<Agreement>& agreements);
std::string checks_markdown(const std::vector<DocumentCheck>& checks);

/// Writes `tensor` as `<dir>/<name>.npy` (creating dir); returns the path.
std::string dump_npy(const std::string& dir, const std::string& name, const Tensor1& tensor);
std::string dump_npy(const std::string& dir, const std::string& name, const Tensor2& tensor);
std::string dump_npy(const std::string& dir, const std::string& name, const Tensor3& tensor);
/// The same in float64, for values computed in double (the step-through's, the frequencies).
std::string dump_npy(const std::string& dir, const std::string& name, const DTensor1& tensor);
std::string dump_npy(const std::string& dir, const std::string& name, const DTensor2& tensor);
std::string dump_npy(const std::string& dir, const std::string& name, const DTensor3& tensor);

/// max |a - b| over all elements (shapes must match).
double max_abs_difference(const Tensor2& a, const Tensor2& b);
double max_abs_difference(const Tensor3& a, const Tensor3& b);

}  // namespace tvlab::cli

namespace tvlab::cli {

/// A document's number against the computed one: it is reproduced when the computed value,
/// rounded to the step the document printed (e.g. 0.1 for "25.1 GB"), gives the document's value.
DocumentCheck check_number(std::string source, std::string quantity, std::string document_says, double document_value,
                           double printed_step, double computed_value, std::string computed_text);

/// Every chapter's Markdown page starts the same way.
std::string results_header(const std::string& chapter, const std::string& title);

}  // namespace tvlab::cli

#pragma once
/// @file
/// Running a chapter's backends on one set of inputs and reporting them: what
/// `tvlab <chapter> --backend NAME|all` does in every chapter, in one place.
///
/// The chapter says how one backend runs on its inputs (`Run (const Backend&)`: the outputs of
/// the functions that backend provides, nothing when it provides none); this file runs the
/// reference first (its outputs are the expected ones, and it validates the inputs), then each
/// selected backend, compares every output with the reference's output of the same name, dumps
/// them, and prints text or JSON. The rules, the same in every chapter:
///
/// - `--backend all` runs every registered backend that provides one of the functions. One that
///   cannot run here (no CUDA device), refuses the case (its own limits: a tvlab::Error after
///   the reference accepted the inputs) or is an unsolved exercise is reported as skipped or
///   not implemented, with the reason, and does not change the exit status.
/// - `--backend NAME` runs that one; if it cannot, that is an error (tvlab::Error naming
///   `--backend`, exit status 2) with the true reason.
/// - The exit status is 1 when an output differs from the reference by more than its tolerance.
/// - `--dump DIR` writes `<output>_<backend>.npy` (and the inputs the chapter writes through
///   the same `Dump`), and the report lists exactly the files written.
///
/// JSON (`--json` or `--format json`), one schema for every chapter:
///
///     {"chapter": "00_attention_basics", "seed": 42, "parameters": {...the sizes and options...},
///      "backends": [{"name": "opt", "kind": "optimized", "status": "agrees",
///                    "outputs": [{"name": "scaled_dot_product_attention",
///                                 "max_abs_error_vs_ref": 5.9e-08, "tolerance": 2.4e-05}],
///                    "details": {...}}, ...],
///      "files": ["out/q.npy", ...]}
///
/// `status` is one of `agrees`, `disagrees`, `skipped`, `not implemented` (the last two with a
/// `reason`).

#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/backend.hpp"
#include "common/walkthrough.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cli {

/// A number, text or truth value in the JSON report, or a list of numbers. (The chapters describe
/// their runs with these; the JSON library is compiled in backend_run.cpp only.)
class JsonScalar {
 public:
  using Value = std::variant<bool, long long, unsigned long long, double, std::string, std::vector<double>>;
  JsonScalar(bool v) : value_(v) {}
  JsonScalar(int v) : value_(static_cast<long long>(v)) {}
  JsonScalar(long v) : value_(static_cast<long long>(v)) {}
  JsonScalar(long long v) : value_(v) {}
  JsonScalar(unsigned v) : value_(static_cast<unsigned long long>(v)) {}
  JsonScalar(unsigned long v) : value_(static_cast<unsigned long long>(v)) {}
  JsonScalar(unsigned long long v) : value_(v) {}
  JsonScalar(double v) : value_(v) {}
  JsonScalar(const char* v) : value_(std::string(v)) {}
  JsonScalar(std::string v) : value_(std::move(v)) {}
  JsonScalar(std::vector<double> v) : value_(std::move(v)) {}
  const Value& value() const { return value_; }

 private:
  Value value_;
};

/// `"key": value` members of a JSON object, in the order given: `{{"heads", 2}, {"mask", "causal"}}`.
struct JsonField {
  std::string key;
  JsonScalar value;
};
using JsonFields = std::vector<JsonField>;

/// One result of a backend, compared with the reference's result of the same name.
struct Output {
  std::string name;                               ///< "scaled_dot_product_attention", "lse"
  std::variant<Tensor1, Tensor2, Tensor3> value;  ///< dumped as `<name>_<backend>.npy`
  double tolerance = 0.0;                         ///< max |x - ref| allowed
  std::string label = "";                         ///< how results.md names it (default: name)
};

/// What one backend produced on the chapter's inputs.
struct Run {
  std::vector<Output> outputs;
  JsonFields details;  ///< facts besides the outputs (tile counts)
  std::string note;    ///< the same facts, for the text report
};

/// The output named `name` of a run (tvlab::Error when there is none).
const Output& output_named(const Run& run, const std::string& name);

/// `run` of `backend` against the reference's run, one row per output: the rows of `tvlab tour`
/// and of results.md.
std::vector<Agreement> agreements_of(const std::string& backend, const std::string& example, const Run& run,
                                     const Run& reference);

/// Writes .npy files into one folder and remembers which, so the report lists exactly those.
class Dump {
 public:
  explicit Dump(std::string dir) : dir_(std::move(dir)) {}
  bool enabled() const { return !dir_.empty(); }
  /// Writes `<dir>/<name>.npy` when enabled.
  void write(const std::string& name, const std::variant<Tensor1, Tensor2, Tensor3>& tensor);
  /// Writes `<dir>/<name>.npy` in float64 when enabled (values computed in double).
  void write_double(const std::string& name, const std::variant<DTensor1, DTensor2, DTensor3>& tensor);
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<std::string> files_;
};

/// What the report says around the results.
struct RunReport {
  std::string chapter;   ///< TVLAB_CHAPTER_NAME
  std::uint64_t seed = 0;
  std::string title;     ///< the text heading: "scaled_dot_product_attention: heads 2, seq 6, ..."
  JsonFields parameters;  ///< the sizes and options of the run
  bool json = false;
};

/// One registry entry with the chapter's way of running it.
struct RunnableBackend {
  std::string name;
  BackendKind kind;
  Capabilities caps;
  std::function<std::optional<Run>()> run;  ///< nothing: the backend provides none of the functions
};

/// Runs the backends `selection` names, compares them with `expected` (the reference's run, which
/// the chapter computes first: it validates the inputs before --step prints anything), prints the
/// report, returns the exit status (0 all agree, 1 some output disagrees). Throws tvlab::Error for
/// a bad `selection`.
int run_backends(const std::vector<RunnableBackend>& backends, const std::string& selection, const Run& expected,
                 Dump& dump, const RunReport& report);

/// The same for a chapter's registry and its `run_one(backend)`.
template <class Backend, class RunOne>
int run_backends(const std::vector<Backend>& registry, const std::string& selection, RunOne run_one,
                 const Run& expected, Dump& dump, const RunReport& report) {
  std::vector<RunnableBackend> runnable;
  for (const auto& b : registry)
    runnable.push_back({b.name, b.kind, b.caps, [&run_one, &b]() -> std::optional<Run> { return run_one(b); }});
  return run_backends(runnable, selection, expected, dump, report);
}

}  // namespace tvlab::cli

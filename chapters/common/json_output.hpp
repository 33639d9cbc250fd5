#pragma once
/// @file
/// Everything `tvlab` prints as JSON (`--json`, `--format json`), in one place and one schema:
///
/// - a chapter command: `{"chapter", "seed", "parameters": {...}, "backends": [{"name", "kind",
///   "status", "reason"?, "outputs": [{"name", "max_abs_error_vs_ref", "tolerance"}], "details"?}],
///   "files": [...]}` (see backend_run.hpp for the statuses);
/// - `tvlab list`: `{"chapters": [{"name", "alias", "summary", "figures": [{"file", "command"}]}]}`;
/// - `tvlab tour`: `{"chapters": [{"name", "agreements": [{"function", "backend", "example",
///   "max_abs_error", "tolerance", "status"}], "document_checks": [{"source", "quantity",
///   "document_says", "computed", "agrees"}]}], "all_agree"}`.
///
/// (The JSON library is compiled in json_output.cpp only.)

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "common/backend_run.hpp"
#include "common/walkthrough.hpp"

namespace tvlab::cli {

/// One backend's line of a chapter command's report.
struct BackendResult {
  std::string name, kind, status, reason, note;
  struct OutputError {
    std::string name;
    double max_abs_error_vs_ref = 0.0, tolerance = 0.0;
  };
  std::vector<OutputError> outputs;
  JsonFields details;
};

void print_run_json(std::ostream& out, const RunReport& report, const std::vector<BackendResult>& results,
                    const std::vector<std::string>& files);
void print_list_json(std::ostream& out, const std::vector<Chapter>& chapters);
void print_tour_json(std::ostream& out, const std::vector<std::pair<std::string, TourReport>>& reports);

}  // namespace tvlab::cli

#include "json_output.hpp"

#include <nlohmann/json.hpp>

#include <ostream>

namespace tvlab::cli {
namespace {

nlohmann::json to_json(const JsonFields& fields) {
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [key, scalar] : fields) std::visit([&](const auto& v) { object[key] = v; }, scalar.value());
  return object;
}

// A non-finite number has no JSON spelling: write it as a string ("inf", "nan").
nlohmann::json number(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

}  // namespace

void print_run_json(std::ostream& out, const RunReport& report, const std::vector<BackendResult>& results,
                    const std::vector<std::string>& files) {
  nlohmann::json doc = {{"chapter", report.chapter}, {"seed", report.seed}, {"parameters", to_json(report.parameters)},
                        {"backends", nlohmann::json::array()}, {"files", files}};
  for (const auto& r : results) {
    nlohmann::json outputs = nlohmann::json::array();
    for (const auto& o : r.outputs)
      outputs.push_back({{"name", o.name}, {"max_abs_error_vs_ref", number(o.max_abs_error_vs_ref)},
                         {"tolerance", number(o.tolerance)}});
    nlohmann::json entry = {{"name", r.name}, {"kind", r.kind}, {"status", r.status}, {"outputs", outputs}};
    if (!r.reason.empty()) entry["reason"] = r.reason;
    if (!r.details.empty()) entry["details"] = to_json(r.details);
    doc["backends"].push_back(entry);
  }
  out << doc.dump(2) << "\n";
}

void print_list_json(std::ostream& out, const std::vector<Chapter>& chapters) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : chapters) {
    nlohmann::json figures = nlohmann::json::array();
    for (const auto& f : c.figures) figures.push_back({{"file", f.file}, {"command", f.command}});
    list.push_back({{"name", c.name}, {"alias", c.alias}, {"summary", c.summary}, {"figures", figures}});
  }
  out << nlohmann::json{{"chapters", list}}.dump(2) << "\n";
}

void print_tour_json(std::ostream& out, const std::vector<std::pair<std::string, TourReport>>& reports) {
  nlohmann::json chapters = nlohmann::json::array();
  bool all_agree = true;
  for (const auto& [name, r] : reports) {
    nlohmann::json agreements = nlohmann::json::array(), checks = nlohmann::json::array();
    for (const auto& a : r.agreements)
      agreements.push_back({{"function", a.function}, {"backend", a.backend}, {"example", a.example},
                            {"max_abs_error", number(a.max_abs_error)}, {"tolerance", number(a.tolerance)},
                            {"status", a.skipped ? "skipped" : a.ok() ? "agrees" : "disagrees"}});
    for (const auto& d : r.checks)
      checks.push_back({{"source", d.source}, {"quantity", d.quantity}, {"document_says", d.document_says},
                        {"computed", d.computed}, {"agrees", d.agrees}});
    chapters.push_back({{"name", name}, {"agreements", agreements}, {"document_checks", checks}});
    all_agree = all_agree && r.all_agree();
  }
  out << nlohmann::json{{"chapters", chapters}, {"all_agree", all_agree}}.dump(2) << "\n";
}

}  // namespace tvlab::cli

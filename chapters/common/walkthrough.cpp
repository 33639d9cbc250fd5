#include "walkthrough.hpp"

#include "tvlab/core/xt_npy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <ostream>
#include <sstream>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cli {

bool TourReport::all_agree() const {
  return std::all_of(agreements.begin(), agreements.end(), [](const Agreement& a) { return a.ok(); });
}


void print_backend_list(std::ostream& out, const std::vector<BackendLine>& lines) {
  for (const auto& b : lines) {
    std::string notes;
    auto note = [&notes](const std::string& text) { notes += (notes.empty() ? "" : "; ") + text; };
    if (b.caps.max_head_dim) note("head_dim <= " + std::to_string(b.caps.max_head_dim));
    if (b.caps.low_precision_inputs) note("low-precision inputs");
    const MaskSupport& m = b.caps.masks;
    if (m.causal || m.top_left || m.window || m.allowed || m.bias || m.alibi) note("masks: " + to_string(m));
    if (const auto reason = unavailable_reason(b.caps)) note("cannot run here: " + *reason);
    out << "  " << std::left << std::setw(18) << b.name << ' ' << std::setw(10) << to_string(b.kind) << ' ' << notes
        << '\n';
  }
}

namespace {

template <class M>
void print_any_matrix(std::ostream& out, const std::string& label, const M& m, int precision, std::size_t max_show) {
  const std::size_t rows = m.shape()[0], cols = m.shape()[1];
  out << label << "  [" << rows << " x " << cols << "]\n";
  auto shown = [&](std::size_t n) {
    std::vector<std::ptrdiff_t> idx;  // -1 marks the elision
    if (n <= max_show) {
      for (std::size_t i = 0; i < n; ++i) idx.push_back(static_cast<std::ptrdiff_t>(i));
    } else {
      for (std::size_t i = 0; i < max_show / 2; ++i) idx.push_back(static_cast<std::ptrdiff_t>(i));
      idx.push_back(-1);
      for (std::size_t i = n - max_show / 2; i < n; ++i) idx.push_back(static_cast<std::ptrdiff_t>(i));
    }
    return idx;
  };
  const auto r_idx = shown(rows), c_idx = shown(cols);
  const int width = precision + 8;
  for (auto r : r_idx) {
    out << "  ";
    for (auto c : c_idx) {
      if (r < 0 || c < 0) {
        out << std::setw(width) << "...";
        continue;
      }
      const double v = static_cast<double>(m(static_cast<std::size_t>(r), static_cast<std::size_t>(c)));
      std::ostringstream cell;
      if (std::isinf(v)) {
        cell << (v < 0 ? "-inf" : "inf");
      } else {
        cell << std::fixed << std::setprecision(precision) << v;
      }
      out << std::setw(width) << cell.str();
    }
    out << '\n';
  }
}

}  // namespace

void print_matrix(std::ostream& out, const std::string& label, const DTensor2& m, int precision, std::size_t max_show) {
  print_any_matrix(out, label, m, precision, max_show);
}
void print_matrix(std::ostream& out, const std::string& label, const Tensor2& m, int precision, std::size_t max_show) {
  print_any_matrix(out, label, m, precision, max_show);
}

void print_step(std::ostream& out, int number, const std::string& title) {
  std::string line = "--- Step " + std::to_string(number) + ": " + title + " ";
  if (line.size() < 78) line += std::string(78 - line.size(), '-');
  out << '\n' << line << '\n';
}

std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::ostringstream out;
  out << '|';
  for (const auto& h : header) out << ' ' << h << " |";
  out << "\n|";
  for (std::size_t i = 0; i < header.size(); ++i) out << " --- |";
  out << '\n';
  for (const auto& row : rows) {
    out << '|';
    for (const auto& cell : row) out << ' ' << cell << " |";
    out << '\n';
  }
  return out.str();
}

std::string sci(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", digits - 1, value);
  return buf;
}

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string agreements_markdown(const std::vector<Agreement>& agreements) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : agreements) {
    // Only pass/fail and the tolerance: the exact error depends on threads and SIMD width.
    rows.push_back({"`" + a.function + "`", a.example, a.backend, sci(a.tolerance, 1),
                    a.skipped ? "skipped (no device)" : (a.ok() ? "agrees" : "**DISAGREES**")});
  }
  return markdown_table({"function", "example", "backend", "tolerance (max abs vs ref)", "result"}, rows);
}

std::string checks_markdown(const std::vector<DocumentCheck>& checks) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : checks)
    rows.push_back({c.source, c.quantity, c.document_says, c.computed, c.agrees ? "reproduced" : "**erratum**"});
  return markdown_table({"source", "quantity", "document says", "computed here", "verdict"}, rows);
}

namespace {
template <class T>
std::string dump_any(const std::string& dir, const std::string& name, const T& tensor) {
  const std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  require(!error, "--dump", "cannot make the folder '", dir, "': ", error.message());
  try {
    xt::dump_npy(path, tensor);
  } catch (const std::exception& e) {
    fail("--dump", "cannot write '", path, "': ", e.what());
  }
  return path;
}
}  // namespace

std::string dump_npy(const std::string& dir, const std::string& name, const Tensor1& t) { return dump_any(dir, name, t); }
std::string dump_npy(const std::string& dir, const std::string& name, const Tensor2& t) { return dump_any(dir, name, t); }
std::string dump_npy(const std::string& dir, const std::string& name, const Tensor3& t) { return dump_any(dir, name, t); }
std::string dump_npy(const std::string& dir, const std::string& name, const DTensor1& t) { return dump_any(dir, name, t); }
std::string dump_npy(const std::string& dir, const std::string& name, const DTensor2& t) { return dump_any(dir, name, t); }
std::string dump_npy(const std::string& dir, const std::string& name, const DTensor3& t) { return dump_any(dir, name, t); }

double max_abs_difference(const Tensor2& a, const Tensor2& b) {
  require(a.shape() == b.shape(), "max_abs_difference", "shapes differ");
  return a.size() ? static_cast<double>(xt::amax(xt::abs(a - b))()) : 0.0;
}
double max_abs_difference(const Tensor3& a, const Tensor3& b) {
  require(a.shape() == b.shape(), "max_abs_difference", "shapes differ");
  return a.size() ? static_cast<double>(xt::amax(xt::abs(a - b))()) : 0.0;
}

}  // namespace tvlab::cli

namespace tvlab::cli {

DocumentCheck check_number(std::string source, std::string quantity, std::string document_says, double document_value,
                           double printed_step, double computed_value, std::string computed_text) {
  const bool agrees = std::fabs(computed_value - document_value) <= 0.5 * printed_step * (1 + 1e-9);
  return {std::move(source), std::move(quantity), std::move(document_says), std::move(computed_text), agrees};
}

std::string results_header(const std::string& chapter, const std::string& title) {
  return "# " + title + ": results\n\n" +
         "Generated by `tvlab " + chapter + " --markdown`; do not edit by hand (CI regenerates this page\n"
         "and fails when it differs). Every number below is computed by the code of this chapter.\n\n";
}

}  // namespace tvlab::cli

#include "svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tvlab/core/error.hpp"

namespace tvlab::cli {
namespace {

std::string num(double v, int decimals = 1) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// White (0) to dark blue (1).
std::string blue(double v) {
  v = std::clamp(v, 0.0, 1.0);
  const int r = static_cast<int>(std::lround(255 - v * (255 - 8)));
  const int g = static_cast<int>(std::lround(255 - v * (255 - 48)));
  const int b = static_cast<int>(std::lround(255 - v * (255 - 107)));
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

}  // namespace

std::string svg_heatmap(const DTensor2& m, const std::string& title, const std::string& row_label,
                        const std::string& col_label) {
  const std::size_t rows = m.shape()[0], cols = m.shape()[1];
  const double cell = rows <= 12 && cols <= 12 ? 44 : std::max(4.0, 480.0 / static_cast<double>(std::max(rows, cols)));
  const double left = 60, top = 50, height = top + cell * static_cast<double>(rows) + 40;
  const double width = std::max(left + cell * static_cast<double>(cols) + 20, left + 7.5 * static_cast<double>(title.size()));
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width, 0) << "\" height=\"" << num(height, 0)
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << num(left) << "\" y=\"24\" font-size=\"14\">" << escape(title) << "</text>\n";
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      const double v = m(i, j);
      const double x = left + cell * static_cast<double>(j), y = top + cell * static_cast<double>(i);
      s << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(cell) << "\" height=\"" << num(cell)
        << "\" fill=\"" << (std::isinf(v) ? std::string("#bbbbbb") : blue(v)) << "\" stroke=\"white\"/>\n";
      if (cell >= 40 && !std::isinf(v))
        s << "<text x=\"" << num(x + cell / 2) << "\" y=\"" << num(y + cell / 2 + 4) << "\" text-anchor=\"middle\" fill=\""
          << (v > 0.55 ? "white" : "black") << "\">" << num(v, 2) << "</text>\n";
    }
  s << "<text x=\"" << num(left + cell * static_cast<double>(cols) / 2) << "\" y=\"" << num(height - 12)
    << "\" text-anchor=\"middle\">" << escape(col_label) << "</text>\n"
    << "<text x=\"20\" y=\"" << num(top + cell * static_cast<double>(rows) / 2) << "\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
    << num(top + cell * static_cast<double>(rows) / 2) << ")\">" << escape(row_label) << "</text>\n</svg>\n";
  return s.str();
}

std::string svg_line_plot(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                          const std::string& y_label, bool log_y) {
  require(!series.empty(), "svg_line_plot", "series must not be empty");
  const double left = 70, top = 40, plot_w = 480, plot_h = 280, width = left + plot_w + 170, height = top + plot_h + 60;
  std::size_t n = 0;
  double lo = 1e300, hi = -1e300;
  auto f = [&](double v) { return log_y ? std::log10(v) : v; };
  for (const auto& sr : series) {
    n = std::max(n, sr.y.size());
    for (double v : sr.y) {
      lo = std::min(lo, f(v));
      hi = std::max(hi, f(v));
    }
  }
  if (!log_y) lo = std::min(lo, 0.0);
  if (hi <= lo) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= log_y ? pad : 0.0;
  hi += pad;
  auto px = [&](std::size_t i) { return left + plot_w * static_cast<double>(i) / static_cast<double>(std::max<std::size_t>(n - 1, 1)); };
  auto py = [&](double v) { return top + plot_h * (1 - (f(v) - lo) / (hi - lo)); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width, 0) << "\" height=\"" << num(height, 0)
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << num(left) << "\" y=\"24\" font-size=\"14\">" << escape(title) << "</text>\n"
    << "<rect x=\"" << num(left) << "\" y=\"" << num(top) << "\" width=\"" << num(plot_w) << "\" height=\"" << num(plot_h)
    << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (int t = 0; t <= 4; ++t) {  // y ticks
    const double v = lo + (hi - lo) * t / 4.0, y = top + plot_h * (1 - t / 4.0);
    s << "<text x=\"" << num(left - 6) << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">"
      << (log_y ? num(std::pow(10.0, v), 2) : num(v, 2)) << "</text>\n";
  }
  for (std::size_t i = 0; i < n; i += std::max<std::size_t>(1, n / 12))  // x ticks
    s << "<text x=\"" << num(px(i)) << "\" y=\"" << num(top + plot_h + 16) << "\" text-anchor=\"middle\">" << i << "</text>\n";
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& sr = series[k];
    s << "<polyline fill=\"none\" stroke=\"" << sr.color << "\" stroke-width=\"2\"" << (sr.dashed ? " stroke-dasharray=\"6 4\"" : "")
      << " points=\"";
    for (std::size_t i = 0; i < sr.y.size(); ++i) s << (i ? " " : "") << num(px(i)) << "," << num(py(sr.y[i]));
    s << "\"/>\n";
    const double ly = top + 16 + 20.0 * static_cast<double>(k);
    s << "<line x1=\"" << num(left + plot_w + 14) << "\" y1=\"" << num(ly - 4) << "\" x2=\"" << num(left + plot_w + 40) << "\" y2=\""
      << num(ly - 4) << "\" stroke=\"" << sr.color << "\" stroke-width=\"2\"" << (sr.dashed ? " stroke-dasharray=\"6 4\"" : "")
      << "/>\n<text x=\"" << num(left + plot_w + 46) << "\" y=\"" << num(ly) << "\">" << escape(sr.name) << "</text>\n";
  }
  s << "<text x=\"" << num(left + plot_w / 2) << "\" y=\"" << num(height - 14) << "\" text-anchor=\"middle\">" << escape(x_label)
    << "</text>\n<text x=\"18\" y=\"" << num(top + plot_h / 2) << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
    << num(top + plot_h / 2) << ")\">" << escape(y_label) << "</text>\n</svg>\n";
  return s.str();
}

void write_svg(const std::string& path, const std::string& svg) {
  std::ofstream out(path);
  require(static_cast<bool>(out), "--svg", "cannot write '", path, "'");
  out << svg;
  require(static_cast<bool>(out), "--svg", "error while writing '", path, "'");
}

}  // namespace tvlab::cli

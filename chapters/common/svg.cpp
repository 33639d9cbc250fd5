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

// A tick label: `decimals` digits after the point, "-0" printed as "0".
std::string tick_label(double v, int decimals) {
  std::string text = num(v, std::max(decimals, 0));
  if (text.find_first_not_of("-0.") == std::string::npos) text = num(0.0, std::max(decimals, 0));
  return text;
}

// The digits after the point that v = c * 10^e (c = 1, 2 or 5) needs: -e when e < 0.
int decimals_of_power(int e) { return e < 0 ? -e : 0; }

}  // namespace

AxisTicks linear_ticks(double lo, double hi, int max_ticks) {
  require(std::isfinite(lo) && std::isfinite(hi), "linear_ticks", "lo and hi must be finite (got ", lo, ", ", hi, ")");
  require(max_ticks >= 2, "linear_ticks", "max_ticks must be at least 2 (got ", max_ticks, ")");
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo <= 1e-12 * std::max(1.0, std::abs(lo))) {  // a flat series: one unit around it
    lo -= 0.5;
    hi += 0.5;
  }
  // Steps 1, 2, 5 x 10^e from below range / max_ticks upwards; the first that covers [lo, hi]
  // with at most max_ticks multiples wins. The tolerance keeps a bound that is a multiple (1.0
  // computed as 0.9999999) from adding a tick.
  int e = static_cast<int>(std::floor(std::log10((hi - lo) / max_ticks)));
  for (;; ++e) {
    for (int c : {1, 2, 5}) {
      const double step = c * std::pow(10.0, e);
      const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
      if (last - first + 1 > max_ticks) continue;
      AxisTicks t;
      for (double k = first; k <= last; ++k) {
        t.values.push_back(k * step);
        t.labels.push_back(tick_label(k * step, decimals_of_power(e)));
      }
      return t;
    }
  }
}

AxisTicks log10_ticks(double lo, double hi, int max_ticks) {
  require(std::isfinite(lo) && std::isfinite(hi) && lo > 0 && hi > 0, "log10_ticks",
          "lo and hi must be finite and positive (got ", lo, ", ", hi, ")");
  require(max_ticks >= 2, "log10_ticks", "max_ticks must be at least 2 (got ", max_ticks, ")");
  if (hi < lo) std::swap(lo, hi);
  const int e_lo = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int e_hi = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  AxisTicks t;
  // A label for c x 10^e: plain digits from 0.001 to 100000, "1e-6" beyond.
  auto label = [](int c, int e) {
    if (e >= -3 && e <= 5) return tick_label(c * std::pow(10.0, e), decimals_of_power(e));
    return std::to_string(c) + "e" + std::to_string(e);
  };
  if (std::log10(hi / lo) >= 2) {  // two decades or more: powers of ten, every `every`-th one
    int every = 1, first = e_lo, last = e_hi;
    for (;; every = every == 1 ? 2 : every == 2 ? 5 : every * 2) {
      first = static_cast<int>(std::floor(static_cast<double>(e_lo) / every)) * every;
      last = static_cast<int>(std::ceil(static_cast<double>(e_hi) / every)) * every;
      if ((last - first) / every + 1 <= max_ticks) break;
    }
    for (int e = first; e <= last; e += every) {
      t.values.push_back(std::pow(10.0, e));
      t.labels.push_back(label(1, e));
    }
    return t;
  }
  // Less than two decades: 1, 2, 5 x 10^e from the largest such value <= lo to the smallest >= hi.
  std::vector<std::pair<int, int>> candidates;  // (c, e)
  for (int e = e_lo - 1; e <= e_hi; ++e)
    for (int c : {1, 2, 5}) candidates.emplace_back(c, e);
  candidates.emplace_back(1, e_hi + 1);
  auto value = [](std::pair<int, int> ce) { return ce.first * std::pow(10.0, ce.second); };
  std::size_t first = 0, last = candidates.size() - 1;
  while (first + 1 < candidates.size() && value(candidates[first + 1]) <= lo * (1 + 1e-9)) ++first;
  while (last > 0 && value(candidates[last - 1]) >= hi * (1 - 1e-9)) --last;
  for (std::size_t k = first; k <= last; ++k) {
    t.values.push_back(value(candidates[k]));
    t.labels.push_back(label(candidates[k].first, candidates[k].second));
  }
  return t;
}

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
  for (const auto& sr : series) {
    n = std::max(n, sr.y.size());
    for (double v : sr.y) {
      require(std::isfinite(v) && (!log_y || v > 0), "svg_line_plot", "series '", sr.name, "' has the value ", v,
              log_y ? " (a log axis needs finite positive values)" : " (values must be finite)");
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  require(n > 0, "svg_line_plot", "every series is empty");
  if (!log_y) lo = std::min(lo, 0.0);
  // The y axis runs from the first tick to the last, both round values.
  const AxisTicks y_ticks = log_y ? log10_ticks(lo, hi) : linear_ticks(lo, hi);
  auto f = [&](double v) { return log_y ? std::log10(v) : v; };
  const double axis_lo = f(y_ticks.values.front()), axis_hi = f(y_ticks.values.back());
  auto px = [&](double i) { return left + plot_w * i / static_cast<double>(std::max<std::size_t>(n - 1, 1)); };
  auto py = [&](double v) { return top + plot_h * (1 - (f(v) - axis_lo) / (axis_hi - axis_lo)); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width, 0) << "\" height=\"" << num(height, 0)
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << num(left) << "\" y=\"24\" font-size=\"14\">" << escape(title) << "</text>\n"
    << "<rect x=\"" << num(left) << "\" y=\"" << num(top) << "\" width=\"" << num(plot_w) << "\" height=\"" << num(plot_h)
    << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (std::size_t t = 0; t < y_ticks.values.size(); ++t) {  // y ticks: a mark and its label
    const double y = py(y_ticks.values[t]);
    s << "<line x1=\"" << num(left - 4) << "\" y1=\"" << num(y) << "\" x2=\"" << num(left) << "\" y2=\"" << num(y)
      << "\" stroke=\"#444\"/>\n<text x=\"" << num(left - 6) << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">"
      << y_ticks.labels[t] << "</text>\n";
  }
  // x ticks at round indices (a step of 1, 2 or 5 x 10^e, at least 1) up to the last point.
  const AxisTicks x_ticks = linear_ticks(0, std::max<double>(static_cast<double>(n) - 1, 1), 13);
  for (std::size_t t = 0; t < x_ticks.values.size(); ++t) {
    const double i = x_ticks.values[t];
    if (i > static_cast<double>(n) - 1 + 1e-9 || std::abs(i - std::round(i)) > 1e-9) continue;
    s << "<text x=\"" << num(px(i)) << "\" y=\"" << num(top + plot_h + 16) << "\" text-anchor=\"middle\">" << x_ticks.labels[t]
      << "</text>\n";
  }
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& sr = series[k];
    s << "<polyline fill=\"none\" stroke=\"" << sr.color << "\" stroke-width=\"2\"" << (sr.dashed ? " stroke-dasharray=\"6 4\"" : "")
      << " points=\"";
    for (std::size_t i = 0; i < sr.y.size(); ++i) s << (i ? " " : "") << num(px(static_cast<double>(i))) << "," << num(py(sr.y[i]));
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

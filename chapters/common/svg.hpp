#pragma once
/// @file
/// Minimal SVG figures for the chapters' `--svg FILE`: a heatmap of a matrix and a line plot.
/// Plain text output, numbers printed with fixed precision, so the same data gives the same file.

#include <string>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::cli {

/// A heatmap of `m` (values in [0, 1] map white -> dark blue; -inf cells are grey and blank), one
/// cell per entry, with the value printed in each cell when the matrix is small.
std::string svg_heatmap(const DTensor2& m, const std::string& title, const std::string& row_label,
                        const std::string& col_label);

struct Series {
  std::string name;
  std::vector<double> y;  ///< plotted against x = 0, 1, 2, ...
  std::string color;      ///< CSS color
  bool dashed = false;
};

/// The ticks of a plot axis: the values where labels go, and the labels as printed.
struct AxisTicks {
  std::vector<double> values;  ///< increasing; the axis runs from the first to the last
  std::vector<std::string> labels;
};

/// Ticks of a linear axis covering [lo, hi]: the multiples of the smallest "nice" step, 1, 2 or 5
/// times a power of ten, of which at most `max_ticks` cover the range (0, 0.2, ..., 1.4 rather
/// than 0, 0.305, ..., 1.22). Labels print the step's decimals, no more (tvlab::Error when lo or hi
/// is not finite, or max_ticks < 2).
AxisTicks linear_ticks(double lo, double hi, int max_ticks = 8);

/// Ticks of a log10 axis covering [lo, hi] (values, lo > 0): the powers of ten (every second,
/// fifth, tenth... when more than `max_ticks` would be needed); when the range spans less than
/// two decades, the values 1, 2 and 5 times a power of ten (0.2, 0.5, 1 for a ratio from 1/4 to 1).
AxisTicks log10_ticks(double lo, double hi, int max_ticks = 8);

/// Line plot of several series sharing an x axis 0..n-1; `log_y` plots log10(y). The y axis runs
/// between round values (linear_ticks / log10_ticks), the x ticks are at round indices.
std::string svg_line_plot(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                          const std::string& y_label, bool log_y = false);

/// Writes `svg` to `path` (tvlab::Error naming `--svg` when the file cannot be written).
void write_svg(const std::string& path, const std::string& svg);

}  // namespace tvlab::cli

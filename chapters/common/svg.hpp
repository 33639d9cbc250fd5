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

/// Line plot of several series sharing an x axis 0..n-1; `log_y` plots log10(y).
std::string svg_line_plot(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                          const std::string& y_label, bool log_y = false);

/// Writes `svg` to `path` (tvlab::Error naming `--svg` when the file cannot be written).
void write_svg(const std::string& path, const std::string& svg);

}  // namespace tvlab::cli

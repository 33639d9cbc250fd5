#include "tvlab/analysis/receptive_field.hpp"

#include <algorithm>
#include <string>

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {

std::vector<bool> receptive_field(const std::vector<SparsePattern>& layers, std::size_t position) {
  const char* fn = "receptive_field";
  require(!layers.empty(), fn, "layers must hold at least one pattern");
  const std::size_t n = layers[0].seq_q;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string name = "layers[" + std::to_string(l) + "]";
    validate_pattern(fn, name.c_str(), layers[l], n, n);
  }
  require(position < n, fn, "position (", position, ") must be below n = ", n);
  // R_0 = {p}; going back one layer: R <- union of S_i over i in R.
  std::vector<bool> reached(n, false), previous(n, false);
  reached[position] = true;
  for (std::size_t l = layers.size(); l-- > 0;) {
    const SparsePattern& s = layers[l];
    previous.swap(reached);
    std::fill(reached.begin(), reached.end(), false);
    for (std::size_t i = 0; i < n; ++i)
      if (previous[i])
        for (std::size_t e = s.row_start[i]; e < s.row_start[i + 1]; ++e) reached[s.keys[e]] = true;
  }
  return reached;
}

std::size_t count_reached(const std::vector<bool>& reached) {
  return static_cast<std::size_t>(std::count(reached.begin(), reached.end(), true));
}

WindowField stacked_window_field(std::size_t n, std::size_t layers, long long left, long long right,
                                 std::size_t dilation, std::size_t position) {
  const char* fn = "stacked_window_field";
  require_positive(fn, "n", n);
  require(position < n, fn, "position (", position, ") must be below n = ", n);
  require(left >= 0, fn, "left (", left, ") must be >= 0");
  require(right >= 0, fn, "right (", right, ") must be >= 0");
  require_positive(fn, "dilation", dilation);
  const std::size_t p = position, d = dilation;
  // k ranges over [-L w_l, L w_r], clipped so that p + k d stays in [0, n): at most
  // floor(p / d) steps back and floor((n - 1 - p) / d) ahead. (Products compared by division,
  // so that huge windows cannot overflow.)
  const auto steps = [&](std::size_t w, std::size_t room) {
    if (layers == 0 || w == 0) return std::size_t{0};
    return w > room / layers ? room : layers * w;
  };
  const std::size_t back = steps(static_cast<std::size_t>(left), p / d);
  const std::size_t ahead = steps(static_cast<std::size_t>(right), (n - 1 - p) / d);
  WindowField f;
  f.first = p - back * d;
  f.last = p + ahead * d;
  f.step = d;
  f.count = back + ahead + 1;
  f.reach_back = p - f.first;
  f.reach_ahead = f.last - p;
  return f;
}

std::size_t layers_to_travel(std::size_t distance, long long radius) {
  require(radius >= 1, "layers_to_travel", "radius (", radius,
          ") must be >= 1: a window of radius 0 never moves information");
  const std::size_t w = static_cast<std::size_t>(radius);
  // ceil(Delta / w)
  return distance / w + (distance % w != 0 ? 1 : 0);
}

std::vector<std::size_t> hops(const SparsePattern& pattern, std::size_t position) {
  const char* fn = "hops";
  validate_pattern(fn, "pattern", pattern, pattern.seq_q, pattern.seq_q);
  require(position < pattern.seq_q, fn, "position (", position, ") must be below n = ", pattern.seq_q);
  // Breadth-first from the output: a row i at distance t reads its keys at distance t + 1.
  std::vector<std::size_t> distance(pattern.seq_q, kUnreachable);
  std::vector<std::size_t> frontier{position}, next;
  distance[position] = 0;
  for (std::size_t t = 0; !frontier.empty(); ++t) {
    next.clear();
    for (std::size_t i : frontier)
      for (std::size_t e = pattern.row_start[i]; e < pattern.row_start[i + 1]; ++e) {
        const std::size_t j = pattern.keys[e];
        if (distance[j] == kUnreachable) {
          distance[j] = t + 1;
          next.push_back(j);
        }
      }
    frontier.swap(next);
  }
  return distance;
}

}  // namespace tvlab::analysis

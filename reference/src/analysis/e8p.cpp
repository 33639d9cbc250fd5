#include "tvlab/analysis/e8p.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "tvlab/analysis/incoherence.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::analysis {
namespace {

using AbsGrid = std::array<std::array<int, 8>, 256>;

// The 29 vectors of norm 12 in get_norm12's order, each as the 3 coordinates that are 1/2 (the
// other 5 are 3/2).
constexpr std::array<std::array<int, 3>, 29> kNorm12Halves = {{
    {1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}, {3, 6, 7}, {3, 5, 7}, {3, 4, 7}, {3, 5, 6},
    {3, 4, 6}, {3, 4, 5}, {2, 6, 7}, {2, 5, 7}, {2, 4, 7}, {2, 5, 6}, {2, 4, 6}, {2, 4, 5},
    {1, 6, 7}, {1, 5, 7}, {1, 4, 7}, {1, 5, 6}, {1, 4, 6}, {0, 4, 5}, {0, 6, 7}, {0, 5, 7},
    {0, 4, 7}, {0, 5, 6}, {0, 4, 6}, {0, 1, 4}, {2, 3, 7},
}};

AbsGrid build_abs_grid() {
  AbsGrid grid{};
  std::size_t count = 0;
  // the 227 of norm <= 10, in twice-units: odd entries with sum of squares <= 40, in lexicographic
  // order (the first coordinate varies slowest); an entry of 7 already has 49 > 40
  std::array<int, 8> v;
  v.fill(1);
  while (true) {
    int norm4 = 0;
    for (int e : v) norm4 += e * e;
    if (norm4 <= 40) grid[count++] = v;
    int i = 7;
    while (i >= 0 && v[static_cast<std::size_t>(i)] == 5) v[static_cast<std::size_t>(i--)] = 1;
    if (i < 0) break;
    v[static_cast<std::size_t>(i)] += 2;
  }
  require(count == 227, "e8p_abs_grid", "found ", count, " absolute vectors of norm <= 10, not 227");
  for (const auto& halves : kNorm12Halves) {
    v.fill(3);
    for (int i : halves) v[static_cast<std::size_t>(i)] = 1;
    grid[count++] = v;
  }
  return grid;
}

// sum of |x_i| is (sum of the twice-units) / 2; its parity decides whether b_7 is negated
bool odd_abs_sum(const std::array<int, 8>& twice) {
  int sum = 0;
  for (int e : twice) sum += e;
  return (sum / 2) % 2 != 0;
}

void require_scale(const char* fn, double scale) {
  require(std::isfinite(scale) && scale > 0.0, fn, "scale (", scale, ") must be positive and finite");
}

double mean_sq(const DTensor2& a, const DTensor2& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a.data()[i] - b.data()[i]) * (a.data()[i] - b.data()[i]);
  return s / static_cast<double>(a.size());
}


}  // namespace

const AbsGrid& e8p_abs_grid() {
  static const AbsGrid grid = build_abs_grid();
  return grid;
}

Vec8 e8p_decode(std::uint16_t code) {
  const auto& v = e8p_abs_grid()[code >> 8];
  unsigned s = code & 0xFFu;
  // the sign byte's parity is the shift; toggling bit 0 then leaves an even number of flips
  const unsigned p = static_cast<unsigned>(std::popcount(s)) & 1u;
  s ^= p;
  Vec8 x;
  for (std::size_t i = 0; i < 8; ++i) {
    double b = 0.5 * v[i];
    if (i == 7 && odd_abs_sum(v)) b = -b;  // b of even sum: in E8
    // x_i = (-1)^{s_sigma(i)} b_i + (-1)^p / 4
    if ((s >> kE8PSignBit[i]) & 1u) b = -b;
    x[i] = b + (p ? -0.25 : 0.25);
  }
  return x;
}

std::uint16_t e8p_encode(const Vec8& y) {
  for (double v : y) require(std::isfinite(v), "e8p_encode", "y has a value that is not finite (", v, ")");
  const AbsGrid& grid = e8p_abs_grid();
  double best = INFINITY;
  unsigned best_p = 0, best_a = 0;
  for (unsigned p = 0; p < 2; ++p) {
    Vec8 z;
    int negatives = 0;
    double z_norm = 0.0;
    for (std::size_t i = 0; i < 8; ++i) {
      z[i] = y[i] - (p ? -0.25 : 0.25);
      negatives += z[i] < 0.0;
      z_norm += z[i] * z[i];
    }
    for (unsigned a = 0; a < 256; ++a) {
      const auto& twice = grid[a];
      // ||z - x||^2 = ||z||^2 + ||v||^2 - 2 sum_i v_i |z_i|, + 4 min_i v_i |z_i| when the parity is wrong
      double norm = 0.0, dot = 0.0, least = INFINITY;
      int sum = 0;
      for (std::size_t i = 0; i < 8; ++i) {
        const double v = 0.5 * twice[i], t = v * std::fabs(z[i]);
        norm += v * v, dot += t, least = std::min(least, t);
        sum += twice[i];
      }
      const bool wrong_parity = (sum / 2 + negatives) % 2 != 0;
      const double score = z_norm + norm - 2.0 * dot + (wrong_parity ? 4.0 * least : 0.0);
      if (score < best) best = score, best_p = p, best_a = a;
    }
  }
  // the winning point's signs: those of z, the cheapest one flipped if the parity is wrong
  const auto& twice = e8p_abs_grid()[best_a];
  Vec8 z;
  std::array<bool, 8> negative;
  int count = 0, sum = 0;
  std::size_t cheapest = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    z[i] = y[i] - (best_p ? -0.25 : 0.25);
    negative[i] = z[i] < 0.0;
    count += negative[i], sum += twice[i];
    if (twice[i] * std::fabs(z[i]) < twice[cheapest] * std::fabs(z[cheapest])) cheapest = i;
  }
  if ((sum / 2 + count) % 2 != 0) negative[cheapest] = !negative[cheapest];
  // sign bit i set where x_i and the table's b_i differ in sign (b_7 < 0 for an odd sum of |x|)
  unsigned s = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    const bool b_negative = i == 7 && odd_abs_sum(twice);
    if (negative[i] != b_negative) s |= 1u << kE8PSignBit[i];
  }
  s ^= best_p;  // the even pattern and the shift back into one byte of parity p
  return static_cast<std::uint16_t>((best_a << 8) | s);
}

double e8p_scale(const DTensor2& w) {
  require(w.dimension() == 2 && w.size() > 0, "e8p_scale", "w must be a non-empty matrix");
  double sum_sq = 0.0;
  for (double v : w) {
    require(std::isfinite(v), "e8p_scale", "w has a value that is not finite (", v, ")");
    sum_sq += v * v;
  }
  const double rms = std::sqrt(sum_sq / static_cast<double>(w.size()));
  return rms == 0.0 ? 1.0 : rms / kE8POptScale;
}

std::vector<std::uint16_t> e8p_encode_rows(const DTensor2& w, double scale) {
  constexpr const char* fn = "e8p_encode_rows";
  require(w.dimension() == 2 && w.size() > 0, fn, "w must be a non-empty matrix");
  require(w.shape()[1] % 8 == 0, fn, "w's row length (", w.shape()[1], ") must be a multiple of 8");
  for (double v : w) require(std::isfinite(v), fn, "w has a value that is not finite (", v, ")");
  require_scale(fn, scale);
  std::vector<std::uint16_t> codes;
  codes.reserve(w.size() / 8);
  for (std::size_t r = 0; r < w.shape()[0]; ++r)
    for (std::size_t j = 0; j < w.shape()[1]; j += 8) {
      Vec8 y;
      for (std::size_t i = 0; i < 8; ++i) y[i] = w(r, j + i) / scale;
      codes.push_back(e8p_encode(y));
    }
  return codes;
}

DTensor2 e8p_decode_rows(const std::vector<std::uint16_t>& codes, std::size_t rows, std::size_t cols, double scale) {
  constexpr const char* fn = "e8p_decode_rows";
  require(cols % 8 == 0, fn, "cols (", cols, ") must be a multiple of 8");
  require(codes.size() * 8 == rows * cols, fn, "codes holds ", codes.size(), " codes, not rows cols / 8 = ", rows * cols / 8);
  require_scale(fn, scale);
  DTensor2 out = DTensor2::from_shape({rows, cols});
  for (std::size_t k = 0; k < codes.size(); ++k) {
    const Vec8 x = e8p_decode(codes[k]);
    for (std::size_t i = 0; i < 8; ++i) out.data()[8 * k + i] = scale * x[i];
  }
  return out;
}

DTensor2 e8p_quantize_rows(const DTensor2& w, double scale) {
  const std::vector<std::uint16_t> codes = e8p_encode_rows(w, scale);
  return e8p_decode_rows(codes, w.shape()[0], w.shape()[1], scale);
}

double e8p_bits_per_weight(std::size_t num_codes, std::size_t num_weights) {
  require(num_weights > 0, "e8p_bits_per_weight", "num_weights must be positive");
  return 16.0 * static_cast<double>(num_codes) / static_cast<double>(num_weights);
}

std::vector<TwoBitRow> two_bit_comparison(const DTensor2& w, const DTensor2& x, std::uint64_t seed) {
  require(x.dimension() == 2 && x.shape()[0] == w.shape()[1], "two_bit_comparison", "x's row count (", x.shape()[0],
          ") must be w's row length (", w.shape()[1], ")");
  const DTensor2 rotated = incoherent_rotation(w, seed, false);
  auto back = [&](const DTensor2& q) { return incoherent_rotation(q, seed, true); };
  auto row = [&](std::string code, double bits, const DTensor2& direct, const DTensor2& via_rotation) {
    return TwoBitRow{std::move(code), bits, mean_sq(w, direct), mean_sq(w, via_rotation), weight_output_error(w, direct, x),
                     weight_output_error(w, via_rotation, x)};
  };
  return {
      row("uniform, 4 levels per weight", 2.0, uniform_2bit_rows(w), back(uniform_2bit_rows(rotated))),
      row("E8 ball, norm^2 <= 10", std::log2(56881.0) / 8.0, e8_quantize_rows(w), back(e8_quantize_rows(rotated))),
      row("E8P (QuIP#)", e8p_bits_per_weight(w.size() / 8, w.size()), e8p_quantize_rows(w, e8p_scale(w)),
          back(e8p_quantize_rows(rotated, e8p_scale(rotated)))),
  };
}

}  // namespace tvlab::analysis

#include "tvlab/ref/affine_quant.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::ref {
namespace {

void require_bits(const char* function, int bits) {
  require(bits >= 2 && bits <= 8, function, "bits (", bits, ") must be between 2 and 8");
}

void require_range(const char* function, ClipRange range) {
  require(std::isfinite(range.lo) && std::isfinite(range.hi), function, "range [", range.lo, ", ", range.hi,
          "] must be finite");
  require(range.lo <= 0.0 && range.hi >= 0.0, function, "range [", range.lo, ", ", range.hi,
          "] must contain 0 (so that 0 is a code)");
}

}  // namespace

std::pair<int, int> code_range(int bits, bool symmetric) {
  require_bits("code_range", bits);
  if (symmetric) {
    const int q = (1 << (bits - 1)) - 1;  // Q = 2^(b-1) - 1
    return {-q, q};
  }
  return {0, (1 << bits) - 1};
}

std::size_t affine_group_length(std::size_t rows, std::size_t cols, const AffineQuantConfig& cfg) {
  const char* fn = "quantize_affine";
  require_bits(fn, cfg.bits);
  require(rows > 0 && cols > 0, fn, "x must not be empty (shape [", rows, ", ", cols, "])");
  switch (cfg.granularity) {
    case Granularity::per_tensor: return rows * cols;
    case Granularity::per_channel: return cols;
    case Granularity::per_group:
      require(cfg.group_size > 0, fn, "group_size must be positive for per-group quantization");
      require(cols % cfg.group_size == 0, fn, "group_size (", cfg.group_size, ") must divide the row length (",
              cols, ")");
      return cfg.group_size;
  }
  fail(fn, "unknown granularity");
}

ClipRange min_max_range(const float* x, std::size_t n, bool symmetric) {
  double lo = 0.0, hi = 0.0;  // starting from 0 widens the range to contain it
  for (std::size_t i = 0; i < n; ++i) {
    lo = std::min(lo, static_cast<double>(x[i]));
    hi = std::max(hi, static_cast<double>(x[i]));
  }
  if (symmetric) {
    const double c = std::max(-lo, hi);  // max |x|
    return {-c, c};
  }
  return {lo, hi};
}

double round_with(double y, Rounding mode, double u) {
  const double down = std::floor(y), frac = y - down;
  switch (mode) {
    case Rounding::nearest_even:
      if (frac != 0.5) return frac < 0.5 ? down : down + 1.0;
      return std::fmod(down, 2.0) == 0.0 ? down : down + 1.0;  // a tie: the even neighbour
    case Rounding::nearest_away: return std::round(y);
    case Rounding::stochastic: return u < frac ? down + 1.0 : down;  // P(up) = frac, so E = y
  }
  return down;
}

AffineParams affine_params(ClipRange range, int bits, bool symmetric) {
  const char* fn = "affine_params";
  require_bits(fn, bits);
  require_range(fn, range);
  AffineParams p;
  if (symmetric) {
    // s = c / Q, c = max(|lo|, |hi|), Q = 2^(b-1) - 1; z = 0
    const double c = std::max(-range.lo, range.hi);
    p.scale = static_cast<float>(c / ((1 << (bits - 1)) - 1));
    return p;
  }
  // s = (hi - lo) / (2^b - 1), z = round(-lo / s) with s the stored float
  const int top = (1 << bits) - 1;
  p.scale = static_cast<float>((range.hi - range.lo) / top);
  if (p.scale == 0.0f) return p;  // the range {0}: every x is 0, code z = 0
  const double z = round_with(-range.lo / static_cast<double>(p.scale), Rounding::nearest_even);
  p.zero_point = static_cast<int>(std::clamp(z, 0.0, static_cast<double>(top)));
  return p;
}

int affine_code(double x, AffineParams p, int bits, bool symmetric, Rounding mode, double u) {
  const auto [qmin, qmax] = code_range(bits, symmetric);
  if (p.scale == 0.0f) return p.zero_point;
  // q = clamp(round(x / s) + z, qmin, qmax), x / s in double from the stored float s
  const double q = round_with(x / static_cast<double>(p.scale), mode, u) + p.zero_point;
  return static_cast<int>(std::clamp(q, static_cast<double>(qmin), static_cast<double>(qmax)));
}

AffineQuantized quantize_affine(const Tensor2& x, const AffineQuantConfig& cfg, const std::vector<ClipRange>& ranges) {
  const char* fn = "quantize_affine";
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  const std::size_t length = affine_group_length(rows, cols, cfg);
  require_finite(fn, "x", x);
  const std::size_t groups = rows * cols / length;
  require(ranges.size() == groups, fn, "ranges has ", ranges.size(), " entries, expected ", groups,
          " (one per group of ", length, " elements)");
  for (const ClipRange& r : ranges) require_range(fn, r);

  AffineQuantized q{.rows = rows,
                    .cols = cols,
                    .bits = cfg.bits,
                    .symmetric = cfg.symmetric,
                    .granularity = cfg.granularity,
                    .group_length = length};
  q.codes.resize(rows * cols);
  Rng rng(cfg.seed);  // one draw per element, in row-major order, when rounding is stochastic
  const float* data = x.data();
  for (std::size_t g = 0; g < groups; ++g) {
    const AffineParams p = affine_params(ranges[g], cfg.bits, cfg.symmetric);
    q.scales.push_back(p.scale);
    q.zero_points.push_back(p.zero_point);
    for (std::size_t i = g * length; i < (g + 1) * length; ++i) {
      const double u = cfg.rounding == Rounding::stochastic ? rng.uniform() : 0.0;
      q.codes[i] = affine_code(data[i], p, cfg.bits, cfg.symmetric, cfg.rounding, u);
    }
  }
  return q;
}

AffineQuantized quantize_affine(const Tensor2& x, const AffineQuantConfig& cfg) {
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  const std::size_t length = affine_group_length(rows, cols, cfg);
  require_finite("quantize_affine", "x", x);
  std::vector<ClipRange> ranges;
  for (std::size_t g = 0; g < rows * cols / length; ++g)
    ranges.push_back(min_max_range(x.data() + g * length, length, cfg.symmetric));
  return quantize_affine(x, cfg, ranges);
}

Tensor2 dequantize_affine(const AffineQuantized& q) {
  const char* fn = "dequantize_affine";
  const auto [qmin, qmax] = code_range(q.bits, q.symmetric);
  require(q.rows > 0 && q.cols > 0, fn, "shape [", q.rows, ", ", q.cols, "] must not be empty");
  require(q.codes.size() == q.rows * q.cols, fn, "codes has ", q.codes.size(), " entries, expected ",
          q.rows * q.cols);
  require(q.group_length > 0 && (q.rows * q.cols) % q.group_length == 0, fn, "group_length (", q.group_length,
          ") must divide the element count (", q.rows * q.cols, ")");
  const std::size_t groups = q.rows * q.cols / q.group_length;
  require(q.scales.size() == groups, fn, "scales has ", q.scales.size(), " entries, expected ", groups);
  require(q.zero_points.size() == groups, fn, "zero_points has ", q.zero_points.size(), " entries, expected ",
          groups);
  Tensor2 out = Tensor2::from_shape({q.rows, q.cols});
  for (std::size_t i = 0; i < q.codes.size(); ++i) {
    require(q.codes[i] >= qmin && q.codes[i] <= qmax, fn, "code ", q.codes[i], " at flat index ", i,
            " is outside [", qmin, ", ", qmax, "]");
    const std::size_t g = i / q.group_length;
    // x^ = s (q - z)
    out.data()[i] = static_cast<float>(static_cast<double>(q.scales[g]) * (q.codes[i] - q.zero_points[g]));
  }
  return out;
}

int min_max_code(double x, double x_min, double x_max, int bits, Rounding mode) {
  const char* fn = "min_max_code";
  require_bits(fn, bits);
  require(x_min <= x_max, fn, "x_min (", x_min, ") must not exceed x_max (", x_max, ")");
  if (x_max == x_min) return 0;
  const double top = (1 << bits) - 1;
  // x_q = round((x - x_min) / (x_max - x_min) (2^b - 1))   (000 L247)
  const double q = round_with((x - x_min) / (x_max - x_min) * top, mode);
  return static_cast<int>(std::clamp(q, 0.0, top));
}

double min_max_dequantize(int code, double x_min, double x_max, int bits) {
  require_bits("min_max_dequantize", bits);
  // x_deq = x_min + x_q / (2^b - 1) (x_max - x_min)   (000 L251)
  return x_min + code / static_cast<double>((1 << bits) - 1) * (x_max - x_min);
}

ClipRange nudge_range(ClipRange range, int bits) {
  const AffineParams p = affine_params(range, bits, false);
  const double s = p.scale;
  return {-p.zero_point * s, ((1 << bits) - 1 - p.zero_point) * s};
}

}  // namespace tvlab::ref

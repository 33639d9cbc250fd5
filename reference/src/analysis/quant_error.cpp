#include "tvlab/analysis/quant_error.hpp"

#include "tvlab/core/rng.hpp"

#include <cmath>
#include <span>
#include <sstream>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/calibration.hpp"

namespace tvlab::analysis {

Tensor2 lesson_weights(bool outliers) {
  Rng rng(808);
  Tensor2 x = rng.normal_matrix(256, 1024);
  if (outliers)
    for (auto& v : x)
      if (rng.uniform() < 0.01) v *= 20.0f;
  return x;
}

std::string clip_rule_name(ClipRule rule, double p) {
  switch (rule) {
    case ClipRule::min_max: return "min-max";
    case ClipRule::percentile: {
      std::ostringstream out;
      out << "p" << p;
      return out.str();
    }
    case ClipRule::mse: return "MSE";
  }
  return "?";
}

std::vector<ref::ClipRange> calibrate_groups(const Tensor2& x, const ref::AffineQuantConfig& cfg, ClipRule rule,
                                             double p, std::size_t K) {
  const std::size_t length = ref::affine_group_length(x.shape()[0], x.shape()[1], cfg);
  std::vector<ref::ClipRange> ranges;
  // group g is the contiguous run [g L, (g + 1) L) of the row-major data
  for (std::size_t start = 0; start < x.size(); start += length) {
    const std::span<const float> group(x.data() + start, length);
    switch (rule) {
      case ClipRule::min_max: ranges.push_back(ref::calibrate_min_max(group, cfg.symmetric)); break;
      case ClipRule::percentile: ranges.push_back(ref::calibrate_percentile(group, p, cfg.symmetric)); break;
      case ClipRule::mse: ranges.push_back(ref::calibrate_mse(group, cfg.bits, cfg.symmetric, K)); break;
    }
  }
  return ranges;
}

double affine_rmse(const Tensor2& x, const ref::AffineQuantConfig& cfg, ClipRule rule, double p, std::size_t K) {
  const Tensor2 back = ref::dequantize_affine(ref::quantize_affine(x, cfg, calibrate_groups(x, cfg, rule, p, K)));
  double sum = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(x.data()[i]) - back.data()[i];
    sum += e * e;
  }
  return std::sqrt(sum / static_cast<double>(x.size()));
}

std::vector<QuantErrorRow> quant_error_table(const Tensor2& x) {
  struct Layout {
    const char* name;
    ref::Granularity granularity;
    std::size_t group_size;
  };
  const Layout layouts[] = {{"per tensor", ref::Granularity::per_tensor, 0},
                            {"per channel", ref::Granularity::per_channel, 0},
                            {"per group 32", ref::Granularity::per_group, 32},
                            {"per group 128", ref::Granularity::per_group, 128}};
  std::vector<QuantErrorRow> rows;
  for (int bits : {8, 4})
    for (const Layout& layout : layouts)
      for (ClipRule rule : {ClipRule::min_max, ClipRule::percentile, ClipRule::mse}) {
        const ref::AffineQuantConfig cfg{
            .bits = bits, .symmetric = true, .granularity = layout.granularity, .group_size = layout.group_size};
        rows.push_back({bits, layout.name, rule, affine_rmse(x, cfg, rule)});
      }
  return rows;
}

}  // namespace tvlab::analysis

#include "tvlab/opt/fast_exp.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "tvlab/core/error.hpp"

#include "detail/fast_exp.hpp"

namespace tvlab::opt {

std::vector<float> fast_exp2(std::span<const float> x) {
  for (std::size_t i = 0; i < x.size(); ++i)
    require(!std::isnan(x[i]) && x[i] < 128.0f, "fast_exp2", "x[", i, "] (", x[i], ") must be below 128 and not NaN");
  using Floats = xsimd::batch<float>;
  std::vector<float> y(x.size());
  std::size_t i = 0;
  for (; i + Floats::size <= x.size(); i += Floats::size)
    detail::fast_exp2(Floats::load_unaligned(x.data() + i)).store_unaligned(y.data() + i);
  if (i < x.size()) {  // the last partial register, padded with zeros
    alignas(64) float lanes[Floats::size] = {};
    std::copy(x.begin() + static_cast<std::ptrdiff_t>(i), x.end(), lanes);
    detail::fast_exp2(Floats::load_aligned(lanes)).store_aligned(lanes);
    std::copy(lanes, lanes + (x.size() - i), y.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return y;
}

}  // namespace tvlab::opt

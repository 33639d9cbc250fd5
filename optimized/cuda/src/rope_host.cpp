// Host-tensor entry point of the CUDA RoPE: validate, build the cos/sin table, upload, launch,
// download. Compiled with or without nvcc.

#include <algorithm>
#include <cmath>
#include <vector>

#include "rope_table.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/cuda/rope.hpp"
#include "tvlab/cuda/rope_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {

namespace detail {

DeviceRopeTable::DeviceRopeTable(const char* function, const RopeFrequencies& freqs, long long first_position,
                                 std::size_t count)
    : pairs(freqs.inv_freq.size()) {
  double largest_theta = 0.0;
  for (const double theta : freqs.inv_freq) largest_theta = std::max(largest_theta, std::abs(theta));
  const double last_position = static_cast<double>(first_position) + static_cast<double>(count) - 1.0;
  require(std::isfinite(last_position * largest_theta), function, "position ", last_position,
          " times freqs.inv_freq overflows: the angle m theta_i must be finite");
  std::vector<float> c(count * pairs), s(count * pairs);
  for (std::size_t t = 0; t < count; ++t) {
    const double m = static_cast<double>(first_position + static_cast<long long>(t));
    for (std::size_t i = 0; i < pairs; ++i) {
      c[t * pairs + i] = static_cast<float>(std::cos(m * freqs.inv_freq(i)) * freqs.attention_factor);
      s[t * pairs + i] = static_cast<float>(std::sin(m * freqs.inv_freq(i)) * freqs.attention_factor);
    }
  }
  cos = DeviceBuffer<float>(c.data(), c.size());
  sin = DeviceBuffer<float>(s.data(), s.size());
}

}  // namespace detail

Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset) {
  validate_rope_input("apply_rope", x, freqs, position_offset);
  const std::size_t heads = x.shape()[0], seq = x.shape()[1], d = x.shape()[2];
  const detail::DeviceRopeTable table("apply_rope", freqs, position_offset, seq);
  DeviceBuffer<float> dx(x.data(), x.size());
  device::apply_rope_inplace(dx.get(), heads * seq, seq, d, table.pairs, table.cos_from(0), table.sin_from(0),
                             layout == RopeLayout::interleaved);
  Tensor3 y = Tensor3::from_shape({heads, seq, d});
  dx.download(y.data());
  return y;
}

}  // namespace tvlab::cuda

// Host-tensor entry point of the CUDA RoPE: validate, build the cos/sin table, upload, launch, download.

#include "tvlab/cuda/rope.hpp"
#include "tvlab/cuda/rope_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/rope.hpp"

namespace tvlab::cuda {

Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset) {
  validate_rope_input("apply_rope", x, freqs, position_offset);
  const std::size_t heads = x.shape()[0], seq = x.shape()[1], d = x.shape()[2];
  // The table in double on the host (angles m * theta reach 1e5 rad and more).
  const opt::RopeCache cache = opt::make_rope_cache(freqs, position_offset, static_cast<long long>(seq));
  DeviceBuffer<float> dx(x.data(), x.size()), dcos(cache.cos.data(), cache.cos.size()),
      dsin(cache.sin.data(), cache.sin.size());
  device::apply_rope_inplace(dx.get(), heads * seq, seq, d, dcos.get(), dsin.get(), layout == RopeLayout::interleaved);
  Tensor3 y = Tensor3::from_shape({heads, seq, d});
  dx.download(y.data());
  return y;
}

}  // namespace tvlab::cuda

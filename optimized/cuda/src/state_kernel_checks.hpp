#pragma once
// The checks chapter 06's CUDA host wrappers (linear_attention_host.cpp, delta_rule_host.cpp) add to
// the reference's: what the device's kernels need beyond valid inputs.

#include <cmath>
#include <cstddef>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda::detail {

// The scale as the device multiplies by it: a float, positive (the reference checked it in double).
inline void require_float_scale(const char* fn, double scale) {
  require(static_cast<float>(scale) > 0.0f && std::isfinite(static_cast<float>(scale)), fn, "cfg.scale (", scale,
          ") must be representable in float, as a positive number, on the device");
}

// One thread block's shared memory, `bytes`, against the device's limit: named after d_k for the
// recurrence (chunk_size 0, the state's columns alone), after chunk_size for the chunked form.
inline void require_shared_memory_fits(const char* fn, std::size_t bytes, std::size_t chunk_size, std::size_t d_k) {
  const std::size_t limit = device::max_shared_bytes_per_block();
  if (chunk_size == 0)
    require(bytes <= limit, fn, "q's d_k (", d_k, ") needs ", bytes,
            " bytes of shared memory per thread block for 32 columns of the state, more than the device's ", limit);
  else
    require(bytes <= limit, fn, "chunk_size (", chunk_size, ") with d_k ", d_k, " needs ", bytes,
            " bytes of shared memory per thread block, more than the device's ", limit, "; use smaller chunks");
}

}  // namespace tvlab::cuda::detail

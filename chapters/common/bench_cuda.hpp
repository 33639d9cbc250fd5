#pragma once
/// @file
/// The CUDA benchmarks of device-pointer entry points: registered only where a device is present,
/// timed with CUDA events and an L2 flush between repeats (`cuda::device::time_kernel_ms`), and
/// checked against the reference on the output copied back before they are timed.

#include <benchmark/benchmark.h>

#include <functional>
#include <string>

#include "bench_support.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/cuda/attention_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::bench {

/// Registers `name` when a CUDA device is present (manual time, milliseconds), under
/// `run_guarded`; otherwise notes it as not timed, with the reason.
void add_device_benchmark(const std::string& name, const std::function<void(benchmark::State&)>& body,
                          const Shapes& shapes);

/// The timing loop of a device benchmark: each iteration's time is the median of
/// `time_kernel_ms`'s repeats of `kernel` (device work only, inputs already on the device).
void time_on_device(benchmark::State& state, const std::function<void()>& kernel);

/// The arguments of chapter 00's attention on the device (`cuda::device::scaled_dot_product_attention`:
/// two cuBLAS batched SGEMMs around a softmax kernel) for q, k, v and out `[heads, n, d]` in device
/// memory, with the workspace `scores` `[heads, n, n]`; scale 1/sqrt(d).
cuda::device::AttentionArgs device_attention_args(const float* q, const float* k, const float* v, float* out,
                                                  float* scores, std::size_t heads, std::size_t n, std::size_t d,
                                                  bool causal);

/// A copy of x in device memory.
cuda::DeviceBuffer<float> to_device(const Tensor3& x);
/// The device array x (`heads * rows * cols` floats) copied back as a `[heads, rows, cols]` tensor.
Tensor3 to_host(const cuda::DeviceBuffer<float>& x, std::size_t heads, std::size_t rows, std::size_t cols);

}  // namespace tvlab::bench

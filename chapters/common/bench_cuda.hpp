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
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::bench {

/// Registers `name` when a CUDA device is present (manual time, milliseconds), under
/// `run_guarded`; otherwise notes it as not timed, with the reason.
void add_device_benchmark(const std::string& name, const std::function<void(benchmark::State&)>& body,
                          const Shapes& shapes);

/// The timing loop of a device benchmark: each iteration's time is the median of
/// `time_kernel_ms`'s repeats of `kernel` (device work only, inputs already on the device).
void time_on_device(benchmark::State& state, const std::function<void()>& kernel);

/// A copy of x in device memory.
cuda::DeviceBuffer<float> to_device(const Tensor3& x);
/// The device array x (`heads * rows * cols` floats) copied back as a `[heads, rows, cols]` tensor.
Tensor3 to_host(const cuda::DeviceBuffer<float>& x, std::size_t heads, std::size_t rows, std::size_t cols);

}  // namespace tvlab::bench

#include "bench_cuda.hpp"

#include <cmath>
#include <stdexcept>

#include "backend.hpp"
#include "tvlab/core/xt.hpp"

namespace tvlab::bench {

void add_device_benchmark(const std::string& name, const std::function<void(benchmark::State&)>& body,
                          const Shapes& shapes) {
  if (const auto reason = unavailable_reason({.needs_device = true})) {
    note_not_timed(name, *reason);
    return;
  }
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) {
    run_guarded(state, [&] { body(state); });
  });
  b->UseManualTime()->Unit(benchmark::kMillisecond);
  shapes(b);
}

void time_on_device(benchmark::State& state, const std::function<void()>& kernel) {
  auto run = [](void* work) { (*static_cast<const std::function<void()>*>(work))(); };
  for (auto _ : state) state.SetIterationTime(cuda::device::time_kernel_ms(run, const_cast<std::function<void()>*>(&kernel)) / 1e3);
}

cuda::device::AttentionArgs device_attention_args(const float* q, const float* k, const float* v, float* out,
                                                  float* scores, std::size_t heads, std::size_t n, std::size_t d,
                                                  bool causal) {
  cuda::device::AttentionArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.out = out;
  args.scores = scores;
  args.heads = heads;
  args.seq_q = args.seq_k = n;
  args.head_dim = args.head_dim_v = d;
  args.scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d)));
  args.causal = causal;
  return args;
}

cuda::DeviceBuffer<float> to_device(const Tensor3& x) { return cuda::DeviceBuffer<float>(x.data(), x.size()); }

Tensor3 to_host(const cuda::DeviceBuffer<float>& x, std::size_t heads, std::size_t rows, std::size_t cols) {
  Tensor3 out = xt::zeros<float>({heads, rows, cols});
  if (out.size() != x.size()) throw std::logic_error("to_host: the device array's size is not heads * rows * cols");
  x.download(out.data());
  return out;
}

}  // namespace tvlab::bench

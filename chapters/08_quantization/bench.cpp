// Chapter 08's benchmarks: ggml's block formats, quantize and dequantize, for every backend of the
// registry and every format, on a 1024 x 4096 weight matrix (16 MiB of floats), after checking the
// bytes (and the values back) against the reference's. (Each call returns a new matrix: at 64 MiB
// glibc would map fresh pages for it every time, and the first write to each page, not the
// format, would set the time; 16 MiB stays below its mapping threshold and reuses the heap.) GB/s counts the bytes each pass must move:
// the floats read and the blocks written (quantize), the blocks read and the floats written
// (dequantize); stream_scale measures what this machine's memory moves in the same run.
//
//   build/default/chapters/bench_08_quantization --benchmark_counters_tabular=true

#include <map>

#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::bench {
namespace {

constexpr std::size_t kRows = 1024, kCols = 4096;

const Tensor2& weights() {
  static const Tensor2 x = [] {
    Rng rng(88);
    return Tensor2(rng.normal_matrix(kRows, kCols, 0.0, 0.02));  // a weight matrix's spread
  }();
  return x;
}

// The reference's blocks of the weights, per format (computed once).
const QuantizedMatrix& reference_blocks(GgmlType type) {
  static std::map<GgmlType, QuantizedMatrix> blocks;
  auto it = blocks.find(type);
  if (it == blocks.end()) it = blocks.emplace(type, reference_backend(quant::backends()).quantize(weights(), type)).first;
  return it->second;
}

double moved_bytes(GgmlType type) {
  return static_cast<double>(kRows * kCols) * (sizeof(float) + bits_per_weight(type) / 8.0);
}

void quantize(benchmark::State& state, const quant::Backend& backend, GgmlType type) {
  const QuantizedMatrix got = backend.quantize(weights(), type);
  if (got.bytes != reference_blocks(type).bytes) {
    state.SkipWithError("the bytes differ from the reference's");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(backend.quantize(weights(), type));
  set_bytes(state, moved_bytes(type));
}

void dequantize(benchmark::State& state, const quant::Backend& backend, GgmlType type) {
  const QuantizedMatrix& q = reference_blocks(type);
  if (!validate(state, backend.dequantize(q), reference_backend(quant::backends()).dequantize(q), {0.0, 0.0})) return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.dequantize(q));
  set_bytes(state, moved_bytes(type));
}

}  // namespace

void register_benchmarks() {
  add_stream_scale({16 << 20});
  for (GgmlType type : quantized_types()) {
    const std::string suffix = "/" + type_name(type);
    add_backends(quant::backends(), &quant::Backend::quantize, "quantize" + suffix,
                 [type](benchmark::State& state, const quant::Backend& b) { quantize(state, b, type); },
                 [](benchmark::internal::Benchmark*, const quant::Backend&) {});
    add_backends(quant::backends(), &quant::Backend::dequantize, "dequantize" + suffix,
                 [type](benchmark::State& state, const quant::Backend& b) { dequantize(state, b, type); },
                 [](benchmark::internal::Benchmark*, const quant::Backend&) {});
  }
}

}  // namespace tvlab::bench

// Chapter 08's benchmarks: ggml's block formats, quantize and dequantize, for every backend of the
// registry and every format, on a 1024 x 4096 weight matrix (16 MiB of floats), after checking the
// bytes (and the values back) against the reference's. (Each call returns a new matrix: at 64 MiB
// glibc would map fresh pages for it every time, and the first write to each page, not the
// format, would set the time; 16 MiB stays below its mapping threshold and reuses the heap.) GB/s counts the bytes each pass must move:
// the floats read and the blocks written (quantize), the blocks read and the floats written
// (dequantize); stream_scale measures what this machine's memory moves in the same run. FP8 (E4M3)
// conversion of the same weights as one tensor, both ways, is timed the same way.
//
// The quantized matrix-vector product, y = W x with W in Q8_0, Q4_0 or Q4_K, on a decode step's shapes
// (4096 x 4096, an attention projection; 4096 x 14336, LLaMA-3-8B's FFN down projection),
// checked bit for bit against the reference, next to OpenBLAS's fp32 sgemv of the same W: GB/s
// counts the weight bytes read (the vector is read once, 4 bytes per column), which is what
// bounds a decode step. The 2:4-sparse product of a pruned weight of the same shapes reads the
// kept half of the values and a byte of position for each.
//
//   build/default/chapters/bench_08_quantization --benchmark_counters_tabular=true

#include <map>
#include <tuple>

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

// The weights of a GEMV shape in each format (reference blocks, made once) and an activation.
const QuantizedMatrix& gemv_weights(std::size_t rows, std::size_t cols, GgmlType type) {
  static std::map<std::tuple<std::size_t, std::size_t, GgmlType>, QuantizedMatrix> held;
  auto it = held.find({rows, cols, type});
  if (it == held.end()) {
    Rng rng(89 + rows + cols);
    it = held.emplace(std::make_tuple(rows, cols, type), reference_backend(quant::backends())
                                                             .quantize(rng.normal_matrix(rows, cols, 0.0, 0.02), type))
             .first;
  }
  return it->second;
}

// args: rows, cols, the format's ggml number.
void gemv(benchmark::State& state, const quant::Backend& backend) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  const auto type = static_cast<GgmlType>(state.range(2));
  const QuantizedMatrix& w = gemv_weights(rows, cols, type);
  Rng rng(90);
  const Tensor2 x_row = rng.normal_matrix(1, cols);
  Tensor1 x = Tensor1::from_shape({cols});
  std::copy(x_row.begin(), x_row.end(), x.begin());
  // the same bits as the reference (integer dots, one order of float terms): tolerance 0
  if (!validate(state, backend.quantized_gemv(w, x), reference_backend(quant::backends()).quantized_gemv(w, x),
                {0.0, 0.0}))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.quantized_gemv(w, x));
  set_bytes(state, static_cast<double>(w.bytes.size()));
  state.SetLabel(type_name(type));
}

// The weights as one tensor, for FP8 (E4M3, saturating: the forward pass's choice) and the codes back.
const Tensor1& flat_weights() {
  static const Tensor1 x = [] {
    Tensor1 flat = Tensor1::from_shape({kRows * kCols});
    std::copy(weights().begin(), weights().end(), flat.begin());
    return flat;
  }();
  return x;
}

const std::vector<std::uint8_t>& reference_fp8_codes() {
  static const std::vector<std::uint8_t> codes =
      reference_backend(quant::backends()).fp8_encode(flat_weights(), ref::Fp8Format::e4m3, ref::Overflow::saturate);
  return codes;
}

// GB/s: the floats read and the codes written (encode), the codes read and the floats written (decode).
void fp8_encode(benchmark::State& state, const quant::Backend& backend) {
  if (backend.fp8_encode(flat_weights(), ref::Fp8Format::e4m3, ref::Overflow::saturate) != reference_fp8_codes()) {
    state.SkipWithError("the codes differ from the reference's");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(backend.fp8_encode(flat_weights(), ref::Fp8Format::e4m3, ref::Overflow::saturate));
  set_bytes(state, static_cast<double>(kRows * kCols) * (sizeof(float) + 1));
}

void fp8_decode(benchmark::State& state, const quant::Backend& backend) {
  if (!validate(state, backend.fp8_decode(reference_fp8_codes(), ref::Fp8Format::e4m3),
                reference_backend(quant::backends()).fp8_decode(reference_fp8_codes(), ref::Fp8Format::e4m3), {0.0, 0.0}))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.fp8_decode(reference_fp8_codes(), ref::Fp8Format::e4m3));
  set_bytes(state, static_cast<double>(kRows * kCols) * (sizeof(float) + 1));
}

// A 2:4-pruned Gaussian weight of a GEMV shape (made once) and its product; GB/s counts the bytes
// the kept values and their positions take (2.5 per dense weight), to compare with sgemv's 4.
const ref::Sparse24& sparse_weights(std::size_t rows, std::size_t cols) {
  static std::map<std::pair<std::size_t, std::size_t>, ref::Sparse24> held;
  auto it = held.find({rows, cols});
  if (it == held.end()) {
    Rng rng(91 + rows + cols);
    it = held.emplace(std::make_pair(rows, cols), ref::prune_2_4(rng.normal_matrix(rows, cols, 0.0, 0.02))).first;
  }
  return it->second;
}

// args: rows, cols.
void sparse_gemv(benchmark::State& state, const quant::Backend& backend) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  const ref::Sparse24& s = sparse_weights(rows, cols);
  Rng rng(92);
  const Tensor2 x_row = rng.normal_matrix(1, cols);
  Tensor1 x = Tensor1::from_shape({cols});
  std::copy(x_row.begin(), x_row.end(), x.begin());
  // float sums in another order than the reference's double one: a relative tolerance
  if (!validate(state, backend.sparse_2_4_gemv(s, x), reference_backend(quant::backends()).sparse_2_4_gemv(s, x),
                {1e-4, 1e-4}))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.sparse_2_4_gemv(s, x));
  set_bytes(state, static_cast<double>(s.values.size() * sizeof(float) + s.positions.size()));
}

}  // namespace

void register_benchmarks() {
  add_openblas_sgemv({{4096, 4096}, {4096, 14336}});
  add_stream_scale({256 << 20});
  add_backends(quant::backends(), &quant::Backend::quantized_gemv, "quantized_gemv", gemv,
               [](benchmark::internal::Benchmark* b, const quant::Backend&) {
                 for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_K})
                   for (std::int64_t cols : {4096, 14336})
                     b->Args({4096, cols, static_cast<std::int64_t>(type)});
                 b->ArgNames({"rows", "cols", "type"});
               });
  add_backends(quant::backends(), &quant::Backend::sparse_2_4_gemv, "sparse_2_4_gemv", sparse_gemv,
               [](benchmark::internal::Benchmark* b, const quant::Backend&) {
                 for (std::int64_t cols : {4096, 14336}) b->Args({4096, cols});
                 b->ArgNames({"rows", "cols"});
               });
  add_stream_scale({16 << 20});
  for (GgmlType type : quantized_types()) {
    const std::string name = type_name(type);
    add_backends(quant::backends(), &quant::Backend::quantize, "quantize/" + name,
                 [type](benchmark::State& state, const quant::Backend& b) { quantize(state, b, type); },
                 [](benchmark::internal::Benchmark*, const quant::Backend&) {});
    add_backends(quant::backends(), &quant::Backend::dequantize, "dequantize/" + name,
                 [type](benchmark::State& state, const quant::Backend& b) { dequantize(state, b, type); },
                 [](benchmark::internal::Benchmark*, const quant::Backend&) {});
  }
  add_backends(quant::backends(), &quant::Backend::fp8_encode, "fp8_encode/E4M3", fp8_encode,
               [](benchmark::internal::Benchmark*, const quant::Backend&) {});
  add_backends(quant::backends(), &quant::Backend::fp8_decode, "fp8_decode/E4M3", fp8_decode,
               [](benchmark::internal::Benchmark*, const quant::Backend&) {});
}

}  // namespace tvlab::bench

// Chapter 03's benchmarks.
//
//   build/default/chapters/bench_03_sparse_attention --benchmark_counters_tabular=true

#include "../common/bench_support.hpp"
#include "backends.hpp"

namespace tvlab::bench {

void register_benchmarks() {}

}  // namespace tvlab::bench

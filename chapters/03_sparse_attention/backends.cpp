#include "backends.hpp"

#include "tvlab/cuda/sparse_attention.hpp"
#include "tvlab/opt/sparse_attention.hpp"
#include "tvlab/ref/sparse_attention.hpp"
#include "tvlab/student/sparse_attention.hpp"

namespace tvlab::sparse {

// Every implementation, in the order the lesson reads them: the reference, each optimized
// version, the CUDA kernels, the student's.
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> table = {
        {.name = "ref",
         .kind = BackendKind::reference,
         .block_sparse = ref::block_sparse_attention,
         .sliding_window = ref::sliding_window_attention},
        // The headline versions: the last block-sparse version, and the window kernel on its tiles.
        {.name = "opt",
         .kind = BackendKind::optimized,
         .block_sparse = opt::block_sparse_attention,
         .sliding_window = opt::sliding_window_attention},
    };
    // Every step of the lesson's block-sparse kernel.
    for (const auto& variant : opt::block_sparse_variants())
      table.push_back({.name = "opt_" + variant.name, .kind = BackendKind::optimized, .block_sparse = variant.function});
    // Both CUDA kernels: one thread per query row, q and the output row in per-thread arrays of 256.
    table.push_back({.name = "cuda",
                     .kind = BackendKind::cuda,
                     .caps = {.needs_device = true, .max_head_dim = kFlashMaxHeadDim},
                     .block_sparse = cuda::block_sparse_attention,
                     .sliding_window = cuda::sliding_window_attention});
    // Exercise 03.3: the sliding-window kernel's inner loop.
    table.push_back({.name = "student", .kind = BackendKind::student, .sliding_window = student::sliding_window_attention});
    return table;
  }();
  return all;
}

}  // namespace tvlab::sparse

#include "backends.hpp"

#include "tvlab/cuda/flash_attention.hpp"
#include "tvlab/opt/flash_attention.hpp"
#include "tvlab/opt/online_softmax.hpp"
#include "tvlab/ref/flash_attention.hpp"
#include "tvlab/ref/online_softmax.hpp"
#include "tvlab/student/flash_attention.hpp"
#include "tvlab/student/io_model.hpp"
#include "tvlab/student/online_softmax.hpp"

namespace tvlab::ch04 {

const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> table = {
        // The reference alone emulates low-precision inputs (fp16, bf16, FP8).
        {.name = "ref",
         .kind = BackendKind::reference,
         .caps = {.max_head_dim = kFlashMaxHeadDim, .low_precision_inputs = true, .masks = ref::kFlashMaskSupport},
         .online_softmax = ref::online_softmax,
         .softmax_merge = ref::online_softmax_merge,
         .best_tiles = analysis::best_flash_tiles,
         .flash_forward = ref::flash_attention_forward,
         .flash_backward = ref::flash_attention_backward},
        {.name = "opt",
         .kind = BackendKind::optimized,
         .caps = {.max_head_dim = kFlashMaxHeadDim, .masks = opt::kFlashMaskSupport},
         .online_softmax = opt::online_softmax,
         .flash_forward = opt::flash_attention_forward,
         .flash_backward = opt::flash_attention_backward},
    };
    // Every step of the lesson: the forward versions, then the backward ones.
    for (const auto& variant : opt::flash_variants())
      table.push_back({.name = "opt_" + variant.name,
                       .kind = BackendKind::optimized,
                       .caps = {.max_head_dim = kFlashMaxHeadDim, .masks = opt::kFlashMaskSupport},
                       .flash_forward = variant.function});
    using Backward = decltype(&opt::flash_attention_backward_v1);
    const std::pair<const char*, Backward> backward_versions[] = {{"opt_backward_v1", opt::flash_attention_backward_v1},
                                                                   {"opt_backward_v2", opt::flash_attention_backward_v2},
                                                                   {"opt_backward_v3", opt::flash_attention_backward_v3},
                                                                   {"opt_backward_v4", opt::flash_attention_backward_v4}};
    for (const auto& [name, backward] : backward_versions)
      table.push_back({.name = name,
                       .kind = BackendKind::optimized,
                       .caps = {.max_head_dim = kFlashMaxHeadDim, .masks = opt::kFlashMaskSupport},
                       .flash_backward = backward});
    // The tiled kernel (with the backward pass) runs one thread per row of a tile.
    table.push_back({.name = "cuda",
                     .kind = BackendKind::cuda,
                     .caps = {.needs_device = true, .max_head_dim = kFlashMaxHeadDim, .masks = cuda::kFlashMaskSupport},
                     .limits = {.max_tile_rows = 1024},
                     .flash_forward = cuda::flash_attention_forward,
                     .flash_backward = cuda::flash_attention_backward});
    // One thread per query row over every key: no tiles of keys to count.
    table.push_back({.name = "cuda_rowwise",
                     .kind = BackendKind::cuda,
                     .caps = {.needs_device = true, .max_head_dim = kFlashMaxHeadDim, .masks = cuda::kFlashMaskSupport},
                     .limits = {.tiles_keys = false},
                     .flash_forward = cuda::flash_attention_forward_rowwise});
    // Tensor cores (WMMA): fp16 or bf16 inputs, fp32 accumulation; tiles of multiples of 16.
    table.push_back({.name = "cuda_tensor_core",
                     .kind = BackendKind::cuda,
                     .caps = {.needs_device = true,
                              .max_head_dim = kFlashMaxHeadDim,
                              .low_precision_inputs = true,
                              .masks = cuda::kFlashMaskSupport},
                     .limits = {.sixteen_bit_only = true},
                     .flash_forward = cuda::flash_attention_forward_tensor_core});
    // Exercises 04.1 to 04.3: the merge, the tiled forward pass, the best tile sizes.
    table.push_back({.name = "student",
                     .kind = BackendKind::student,
                     .caps = {.max_head_dim = kFlashMaxHeadDim, .masks = student::kFlashMaskSupport},
                     .softmax_merge = student::online_softmax_merge,
                     .best_tiles = student::best_flash_tiles,
                     .flash_forward = student::flash_attention_forward});
    return table;
  }();
  return all;
}

}  // namespace tvlab::ch04

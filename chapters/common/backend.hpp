#pragma once
/// @file
/// A chapter's backend registry: one table of every implementation of the chapter's functions
/// (the reference, each optimized version, each CUDA kernel, the student's), each with a name
/// and what it can run. The chapter's tests, `tvlab <chapter> --backend NAME`, `tvlab tour`
/// and the chapter's benchmarks all iterate the same table, so a new kernel registered once
/// is tested, runnable from the command line and timed.
///
/// Each chapter writes, in `chapters/NN_<topic>/backends.hpp`,
///
///     struct Backend {
///       std::string name;          // "ref", "opt_v2", "cuda_rowwise", "student"
///       BackendKind kind;
///       Capabilities caps;         // what it accepts, whether it needs a GPU
///       std::function<...> f;      // one member per function of the chapter (empty: not provided)
///     };
///     const std::vector<Backend>& backends();
///
/// and fills the table with designated initializers in `backends.cpp`. The helpers below work
/// on any such table.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tvlab/core/attention_mask.hpp"

namespace tvlab {

/// Where an implementation comes from: the reading order of a chapter.
enum class BackendKind {
  reference,  ///< `tvlab::ref`: plain loops, double accumulation, the meaning
  optimized,  ///< `tvlab::opt`: the CPU versions (the headline one and each numbered step)
  cuda,       ///< `tvlab::cuda`: host tensors in and out, runs on a GPU
  student,    ///< `tvlab::student`: the exercises (the worked solutions or the stubs)
};

/// "reference", "optimized", "cuda" or "student".
const char* to_string(BackendKind kind);

/// What an implementation accepts besides the chapter's common case. Tests, the command line
/// and the benchmarks read these fields instead of testing names.
struct Capabilities {
  bool needs_device = false;  ///< runs on a CUDA device: skipped (with the reason) where there is none
  /// The largest head dimension (or row length) it takes; 0 means any.
  std::size_t max_head_dim = 0;
  /// It also takes fp16/bf16/fp8 inputs (as emulation or on tensor cores); otherwise fp32 only.
  bool low_precision_inputs = false;
  /// The parts of an attention mask (`AttentionMask`) it implements; it refuses the others by
  /// name through `require_supported`. Empty for functions that take no mask.
  MaskSupport masks{};
};

/// Why `caps` cannot run on this machine ("no CUDA device: ..."), or nothing when it can.
std::optional<std::string> unavailable_reason(const Capabilities& caps);

/// The errors of the helpers below (out of line: they build messages).
[[noreturn]] void throw_no_reference_backend();
[[noreturn]] void throw_unknown_backend(std::string_view selection, const std::string& names);

/// The names of a registry's entries, in order, as "ref, opt, opt_v1, cuda".
template <class Backend>
std::string backend_names(const std::vector<Backend>& all) {
  std::string names;
  for (const auto& b : all) names += (names.empty() ? "" : ", ") + b.name;
  return names;
}

/// The entry of kind `reference` (every registry has one: it defines the results).
template <class Backend>
const Backend& reference_backend(const std::vector<Backend>& all) {
  const auto it = std::find_if(all.begin(), all.end(), [](const Backend& b) { return b.kind == BackendKind::reference; });
  if (it == all.end()) throw_no_reference_backend();
  return *it;
}

/// The entries `tvlab tour` and results.md compare with the reference: the first entry of kind
/// optimized (the headline version) and, with `include_cuda`, the first CUDA entry when this
/// machine can run it. (results.md passes include_cuda = false: it must not depend on the machine.)
template <class Backend>
std::vector<Backend> headline_backends(const std::vector<Backend>& all, bool include_cuda) {
  std::vector<Backend> out;
  for (const BackendKind kind : {BackendKind::optimized, BackendKind::cuda}) {
    if (kind == BackendKind::cuda && !include_cuda) continue;
    const auto it = std::find_if(all.begin(), all.end(), [kind](const Backend& b) { return b.kind == kind; });
    if (it != all.end() && !unavailable_reason(it->caps)) out.push_back(*it);
  }
  return out;
}

/// The entries of `all` that provide member `f` (a std::function that may be empty).
template <class Backend, class Member>
std::vector<Backend> providing(const std::vector<Backend>& all, Member Backend::*f) {
  std::vector<Backend> out;
  for (const auto& b : all)
    if (b.*f) out.push_back(b);
  return out;
}

}  // namespace tvlab

#pragma once
/// @file
/// `--load DIR`: a chapter's inputs read from NumPy `.npy` files (the names `--dump` writes)
/// instead of drawn from the seeded random generator, every file checked before it is used.
///
/// A run reads in two steps, so it is costed before anything large is allocated: first each
/// file's header (`shape`: its sizes decide the run's), then, after `RunCost` accepted them, the
/// values (`tensor1/2/3`). Each problem is one tvlab::Error naming `--load`, the file and what was
/// expected: a missing or unreadable file, not a `.npy`, a dtype other than float32 or float64
/// (float64 is rounded to float), a wrong rank or shape, a size that disagrees with the file's
/// length, a non-finite value.

#include <cstddef>
#include <string>
#include <vector>

#include "common/walkthrough.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cli {

/// The `.npy` files of one folder.
class Load {
 public:
  explicit Load(std::string dir) : dir_(std::move(dir)) {}
  bool enabled() const { return !dir_.empty(); }
  /// `<dir>/<name>.npy`.
  std::string path(const std::string& name) const;

  /// The shape of `<dir>/<name>.npy`, which must have `rank` dimensions (`meaning` says which,
  /// e.g. "[heads, seq, head_dim]"), read from its header: the values are not read yet.
  std::vector<std::size_t> shape(const std::string& name, std::size_t rank, const std::string& meaning) const;

  /// The values of `<dir>/<name>.npy` as float, which must have exactly `expected` as shape
  /// (`meaning` names its dimensions) and only finite values.
  Tensor1 tensor1(const std::string& name, const std::vector<std::size_t>& expected, const std::string& meaning) const;
  Tensor2 tensor2(const std::string& name, const std::vector<std::size_t>& expected, const std::string& meaning) const;
  Tensor3 tensor3(const std::string& name, const std::vector<std::size_t>& expected, const std::string& meaning) const;

 private:
  std::vector<float> values(const std::string& name, const std::vector<std::size_t>& expected,
                            const std::string& meaning) const;
  std::string dir_;
};

/// The size a loaded array sets for a size option: `loaded` (the file's dimension, `where`
/// names it: "q.npy's seq, dimension 1"), or a tvlab::Error naming the option and the file when
/// the option was also given with another value. Sizes the int options cannot hold are refused.
int size_from_load(const StandardOptions& standard, const std::string& option, int option_value, std::size_t loaded,
                   const std::string& where);

/// The sizes of an attention command: --heads, --seq, --seq-k (0: --seq), --head-dim.
struct AttentionSizes {
  int heads, seq, seq_k, head_dim;
};

/// `given` (the options), or with --load the sizes of q.npy `[heads, seq, head_dim]` and k.npy
/// `[heads, seq_k, head_dim]` (each checked by size_from_load against an option also given).
AttentionSizes attention_sizes(const Load& load, const StandardOptions& standard, AttentionSizes given);

}  // namespace tvlab::cli

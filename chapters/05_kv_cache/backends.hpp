#pragma once
/// @file
/// The template chapter's backend registry (see `chapters/common/backend.hpp`). Its example
/// function is chapter 00's row softmax; a new chapter puts its own functions here, one member
/// per function, and renames the namespace after its topic.

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::kv {

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  std::function<Tensor2(const Tensor2&)> softmax;  ///< one member per function of the chapter
};

/// ref, opt, cuda, student.
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::kv

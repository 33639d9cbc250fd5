#pragma once
/// @file
/// The template chapter's exercise: the row softmax again, under its own name (a chapter copied
/// from the template renames it after its own functions).

#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup chapter_template
/// Same contract as `tvlab::ref::softmax`.
Tensor2 example_softmax(const Tensor2& x);

}  // namespace tvlab::student

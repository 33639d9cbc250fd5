#pragma once
/// @file
/// Exercise 04.1: merging two online-softmax states. Same contract as `tvlab::ref::online_softmax_merge`.

#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::student {

using ref::SoftmaxState;

/// @ingroup ch04
SoftmaxState online_softmax_merge(SoftmaxState a, SoftmaxState b);

}  // namespace tvlab::student

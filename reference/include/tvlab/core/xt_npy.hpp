#pragma once
/// @file
/// xtensor's NumPy `.npy` reader/writer, kept out of `xt.hpp` because only the CLI needs it.
/// (xtensor 0.26 moved it to `<xtensor/io/xnpy.hpp>`.)

#if __has_include(<xtensor/io/xnpy.hpp>)
#include <xtensor/io/xnpy.hpp>
#else
#include <xtensor/xnpy.hpp>
#endif

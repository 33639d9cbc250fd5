#pragma once
/// @file
/// The one place that includes xtensor. xtensor 0.26 moved its headers from
/// `<xtensor/xtensor.hpp>` to `<xtensor/containers/xtensor.hpp>`; an upgrade touches this file only.

#if __has_include(<xtensor/containers/xtensor.hpp>)
#include <xtensor/containers/xtensor.hpp>
#include <xtensor/views/xview.hpp>
#else
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>
#endif

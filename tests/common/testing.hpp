#pragma once
// Helpers shared by every chapter's tests: teaching comparisons, device skips, oracles' tolerances.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "tvlab/core/compare.hpp"
#include "tvlab/core/error.hpp"
#include "common/backend.hpp"

namespace tvlab::testing {

/// What a failing comparison prints besides the numbers: how to reproduce it and the usual mistake.
struct Context {
  std::string what;                     ///< "scaled_dot_product_attention, causal, seq 129"
  std::vector<std::string> axis_names;  ///< {"h", "i", "d"}
  unsigned long long seed = 0;
  std::string explore;                  ///< a `tvlab` command that steps through a similar case
  std::string hint;                     ///< the usual mistake, if there is one
};

/// argv[0] of the test program (set by tests/common/main.cpp).
std::string& program_path();

/// "<program> --gtest_filter='<suite>.<test>'": reruns exactly the failing test.
inline std::string rerun_command() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!info) return "";
  return program_path() + " --gtest_filter='" + info->test_suite_name() + "." + info->name() + "'";
}

/// Passes when every element satisfies |x - ref| <= atol + rtol |ref|; otherwise explains.
template <class A, class E>
::testing::AssertionResult matches(const A& actual, const E& expected, Tolerance tol, const Context& ctx) {
  const CompareReport report = compare(actual, expected, tol);
  if (report.ok()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << ctx.what << " disagrees with the double-precision oracle (seed " << ctx.seed << ")\n"
          << report.describe(ctx.axis_names);
  if (report.shape_mismatch) failure << "\nexpected shape " << shape_string_of(expected);
  failure << "\nreproduce: " << rerun_command();
  if (!ctx.explore.empty()) failure << "\nexplore: " << ctx.explore;
  if (!ctx.hint.empty()) failure << "\nhint: " << ctx.hint;
  return failure;
}

/// Float tolerance for a reduction of length k, against a double oracle (tvlab/core/compare.hpp).
using tvlab::reduction_rtol;

/// Runs `call` and passes when it throws tvlab::Error whose message contains every `needle`.
template <class F>
::testing::AssertionResult throws_error_naming(F&& call, const std::vector<std::string>& needles) {
  try {
    call();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& needle : needles) {
      if (message.find(needle) == std::string::npos) {
        return ::testing::AssertionFailure() << "tvlab::Error message \"" << message << "\" does not mention \""
                                             << needle << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "expected tvlab::Error, got another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "expected tvlab::Error naming the parameter, nothing was thrown";
}

}  // namespace tvlab::testing

/// In a test over a backend registry: skip an entry this machine cannot run (a CUDA kernel
/// without a device), saying why.
#define TVLAB_SKIP_WITHOUT_DEVICE(backend)                                                \
  do {                                                                                    \
    if (const auto reason = ::tvlab::unavailable_reason((backend).caps))                  \
      GTEST_SKIP() << (backend).name << ": " << *reason;                                  \
  } while (0)

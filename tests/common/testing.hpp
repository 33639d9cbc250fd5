#pragma once
// Helpers shared by every chapter's tests: teaching comparisons, device skips, oracles' tolerances.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tvlab/core/compare.hpp"
#include "tvlab/core/error.hpp"
#include "common/backend.hpp"

namespace tvlab::testing {

/// What a failing comparison prints besides the numbers: the case, how to reproduce it, and the
/// formula the failing element should satisfy.
struct Context {
  std::string what;                     ///< the function and the case: "scaled_dot_product_attention, causal, seq 129"
  std::vector<std::string> axis_names;  ///< {"h", "i", "d"}
  unsigned long long seed = 0;
  std::string explore;                  ///< a `tvlab` command that steps through a similar case
  std::string hint;                     ///< what every element must satisfy, and the usual mistake
  /// The hint for one element, given the coordinates of the worst one: it can name that element
  /// and spell out its formula with the case's numbers ("bias(h=1, i=3, j=7) = ...").
  std::function<std::string(const std::vector<std::size_t>&)> hint_at = {};
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
  if (ctx.hint_at && !report.shape_mismatch && !report.worst_index.empty())
    failure << "\nat the worst element: " << ctx.hint_at(report.worst_index);
  return failure;
}

/// True in an exercise program (tests/common/exercise_main.cpp), false in a chapter's test program.
bool exercise_program();

/// Names the exercise a test grades ("01.1", or "01.1, 01.2" for a test that calls both), when the backend under test is the student's: every failure
/// in the test then ends with "exercise NN.M (exercises/<chapter>/exercises.md; your code:
/// .../student.cpp)", and the test's JSON report records `"exercise": "NN.M"`, from which
/// `scripts/check_exercises.py --summary` (run by `make exercises`) tells which exercises are
/// solved. For the other backends it does nothing. Use it through TVLAB_EXERCISE.
class ExerciseScope {
 public:
  template <class Backend>
  ExerciseScope(const Backend& backend, const char* exercise, const char* chapter, const char* file, int line) {
    if (backend.kind != BackendKind::student) return;
    ::testing::Test::RecordProperty("exercise", exercise);
    const std::string folder = std::string("exercises/") + chapter;
    const std::string code = folder + (exercise_program() ? "/student.cpp" : "/solution.cpp");
    trace_.emplace(file, line,
                   "exercise " + std::string(exercise) + " (" + folder + "/exercises.md; the code: " + code + ")");
  }

 private:
  std::optional<::testing::ScopedTrace> trace_;
};

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

/// First line of a test over a backend registry whose student entry is an exercise:
/// `TVLAB_EXERCISE(impl, "00.2");` (see ExerciseScope).
#define TVLAB_EXERCISE(backend, exercise) \
  const ::tvlab::testing::ExerciseScope tvlab_exercise_scope_((backend), (exercise), TVLAB_CHAPTER_NAME, __FILE__, __LINE__)

/// In a test of `tvlab::cuda` functions outside a registry: skip, saying why, where there is no
/// CUDA device (the file includes `tvlab/cuda/runtime.hpp`).
#define TVLAB_SKIP_WITHOUT_CUDA_DEVICE()                                                 \
  do {                                                                                  \
    if (!::tvlab::cuda::device_available())                                             \
      GTEST_SKIP() << "no CUDA device (" << ::tvlab::cuda::device_description() << ")"; \
  } while (0)

/// In a test over a backend registry: skip an entry this machine cannot run (a CUDA kernel
/// without a device), saying why.
#define TVLAB_SKIP_WITHOUT_DEVICE(backend)                                                \
  do {                                                                                    \
    if (const auto reason = ::tvlab::unavailable_reason((backend).caps))                  \
      GTEST_SKIP() << (backend).name << ": " << *reason;                                  \
  } while (0)

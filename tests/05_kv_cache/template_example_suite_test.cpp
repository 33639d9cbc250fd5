// The template's exercise 99.1 (the row softmax), which exercises/05_kv_cache still holds from the
// chapter's scaffold: graded here so that `make exercises` and `make check-exercises` keep working
// until chapter 05's own exercises replace exercises/05_kv_cache. Delete this file with them.
// (The chapter's registry, chapters/05_kv_cache/backends.hpp, is about the KV cache and has no
// softmax; this file keeps its own two-entry table.)

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/softmax.hpp"
#include "tvlab/student/example.hpp"

namespace tvlab::kv {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;

struct ExampleBackend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  std::function<Tensor2(const Tensor2&)> softmax;
};
void PrintTo(const ExampleBackend& b, std::ostream* out) { *out << b.name; }

const std::vector<ExampleBackend>& example_backends() {
  static const std::vector<ExampleBackend> all = {
      {.name = "ref", .kind = BackendKind::reference, .softmax = ref::softmax},
      {.name = "student", .kind = BackendKind::student, .softmax = student::example_softmax},
  };
  return all;
}

class TemplateExample : public ::testing::TestWithParam<ExampleBackend> {};

TEST_P(TemplateExample, softmax_matches_the_double_oracle) {
  const ExampleBackend& backend = GetParam();
  TVLAB_EXERCISE(backend, "99.1");
  Rng rng(11);
  const Tensor2 x = rng.normal_matrix(5, 37, 0.0, 3.0);
  EXPECT_TRUE(matches(backend.softmax(x), tvlab::testing::softmax_oracle(x), {2e-6, reduction_rtol(37)},
                      {"softmax, 5 x 37",
                       {"row", "col"},
                       11,
                       "",
                       "$y_{ij} = e^{x_{ij} - m_i} / \\sum_k e^{x_{ik} - m_i}$ with $m_i = \\max_k x_{ik}$"}));
}

INSTANTIATE_TEST_SUITE_P(Template, TemplateExample,
                         ::testing::ValuesIn(tvlab::testing::under_test(example_backends(), &ExampleBackend::softmax)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::kv

#pragma once
// The backends a chapter's value-parameterised suites run over: the entries of the chapter's
// registry (chapters/NN_<topic>/backends.hpp). One suite source builds two programs: the
// chapter's test program runs it over every entry (the student's being the worked solutions),
// the exercise program over the student's entries alone (the stubs, until they are solved).

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/backend.hpp"

namespace tvlab::testing {

/// True in an exercise program (tests/common/exercise_main.cpp), false in a chapter's test
/// program (tests/common/main.cpp): decided at link time.
bool exercise_program();

/// The entries of `all` that provide member `f` and that this program tests.
template <class Backend, class Member>
std::vector<Backend> under_test(const std::vector<Backend>& all, Member Backend::*f) {
  std::vector<Backend> out;
  for (const auto& b : providing(all, f))
    if (!exercise_program() || b.kind == BackendKind::student) out.push_back(b);
  return out;
}

/// "seq 129, head_dim 64, causal" -> "seq_129_head_dim_64_causal": a gtest-safe name.
inline std::string identifier(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (keep) {
      out += c;
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

/// gtest name of a (backend, case) parameter: "opt_seq_129_head_dim_64_causal".
struct ImplCaseName {
  template <class Info>
  std::string operator()(const Info& info) const {
    std::ostringstream label;
    PrintTo(std::get<1>(info.param), &label);
    return std::get<0>(info.param).name + "_" + identifier(label.str());
  }
};

/// gtest parameter name: the backend's name ("ref", "opt_v2", "cuda", "student").
struct ImplName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return info.param.name;
  }
};

}  // namespace tvlab::testing

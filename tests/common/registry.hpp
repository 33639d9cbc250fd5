#pragma once
// The implementation registry a chapter's value-parameterised suites run over.
// Each chapter defines `struct Impl { std::string name; bool needs_device; std::function<...> f...; }`
// and the two registries (all backends, or the student's) in separate translation units,
// so one suite source builds both the chapter's test program and its exercise program.

#include <functional>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

namespace tvlab::testing {

/// The entries of `all` that provide member `f` (the student registry provides only the
/// exercised functions).
template <class Impl, class Member>
std::vector<Impl> providing(const std::vector<Impl>& all, Member Impl::*f) {
  std::vector<Impl> out;
  for (const auto& impl : all)
    if (impl.*f) out.push_back(impl);
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

/// gtest name of an (implementation, case) parameter: "opt_seq_129_head_dim_64_causal".
struct ImplCaseName {
  template <class Info>
  std::string operator()(const Info& info) const {
    std::ostringstream label;
    PrintTo(std::get<1>(info.param), &label);
    return std::get<0>(info.param).name + "_" + identifier(label.str());
  }
};

/// gtest parameter name: the implementation's name ("ref", "opt", "cuda", "student").
struct ImplName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return info.param.name;
  }
};

}  // namespace tvlab::testing

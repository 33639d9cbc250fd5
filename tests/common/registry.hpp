#pragma once
// The implementation registry a chapter's value-parameterised suites run over.
// Each chapter defines `struct Impl { std::string name; bool needs_device; std::function<...> f...; }`
// and the two registries (all backends, or the student's) in separate translation units,
// so one suite source builds both the chapter's test program and its exercise program.

#include <functional>
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

/// gtest parameter name: the implementation's name ("ref", "opt", "cuda", "student").
struct ImplName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return info.param.name;
  }
};

}  // namespace tvlab::testing

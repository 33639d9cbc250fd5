#include "backend_run.hpp"

#include <cmath>
#include <iostream>

#include "tvlab/core/error.hpp"
#include "json_output.hpp"
#include "walkthrough.hpp"

namespace tvlab::cli {

void Dump::write(const std::string& name, const std::variant<Tensor1, Tensor2, Tensor3>& tensor) {
  if (!enabled()) return;
  files_.push_back(std::visit([&](const auto& t) { return dump_npy(dir_, name, t); }, tensor));
}

void Dump::write_double(const std::string& name, const std::variant<DTensor1, DTensor2, DTensor3>& tensor) {
  if (!enabled()) return;
  files_.push_back(std::visit([&](const auto& t) { return dump_npy(dir_, name, t); }, tensor));
}

namespace {

// max |a - b| over every element; NaN when the shapes differ or an element is NaN, so that
// the comparison `error <= tolerance` fails.
double max_abs_error(const std::variant<Tensor1, Tensor2, Tensor3>& a, const std::variant<Tensor1, Tensor2, Tensor3>& b) {
  if (a.index() != b.index()) return std::nan("");
  return std::visit(
      [&b](const auto& x) {
        const auto& y = std::get<std::decay_t<decltype(x)>>(b);
        if (x.shape() != y.shape()) return std::nan("");
        double worst = 0.0;
        for (std::size_t i = 0; i < x.size(); ++i) {
          const double d = std::fabs(static_cast<double>(x.data()[i]) - static_cast<double>(y.data()[i]));
          if (!(d <= worst)) worst = d;  // keeps a NaN
        }
        return worst;
      },
      a);
}

const Output* find_output(const Run& run, const std::string& name) {
  for (const auto& o : run.outputs)
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace

const Output& output_named(const Run& run, const std::string& name) {
  const Output* o = find_output(run, name);
  require(o != nullptr, "output_named", "the run has no output named ", name);
  return *o;
}

std::vector<Agreement> agreements_of(const std::string& backend, const std::string& example, const Run& run,
                                     const Run& reference) {
  std::vector<Agreement> rows;
  for (const auto& out : run.outputs) {
    const Output& want = output_named(reference, out.name);
    rows.push_back({out.label.empty() ? out.name : out.label, backend, example, max_abs_error(out.value, want.value),
                    want.tolerance});
  }
  return rows;
}

int run_backends(const std::vector<RunnableBackend>& backends, const std::string& selection, const Run& expected,
                 Dump& dump, const RunReport& report) {
  const RunnableBackend* reference = &reference_backend(backends);
  std::vector<const RunnableBackend*> chosen;
  for (const auto& b : backends)
    if (selection == "all" || b.name == selection) chosen.push_back(&b);
  if (chosen.empty()) throw_unknown_backend(selection, backend_names(backends));
  const bool named = selection != "all";

  std::vector<BackendResult> results;
  bool all_agree = true;
  for (const RunnableBackend* b : chosen) {
    BackendResult r;
    r.name = b->name;
    r.kind = to_string(b->kind);
    const auto refuse = [&](const std::string& status, const std::string& reason) {
      if (named) fail("--backend", b->name, " cannot run: ", status == "not implemented" ? "not implemented: " : "", reason);
      r.status = status;
      r.reason = reason;
      results.push_back(r);
    };
    if (const auto reason = unavailable_reason(b->caps)) {
      refuse("skipped", *reason);
      continue;
    }
    std::optional<Run> run;
    try {
      run = b == reference ? expected : b->run();
    } catch (const NotImplemented& e) {
      // e.what() is "not implemented: exercise NN.M: ...": the status says the first part.
      const std::string what = e.what(), prefix = "not implemented: ";
      refuse("not implemented", what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
      continue;
    } catch (const Error& e) {
      // The reference accepted these inputs: what is left is this backend's own limit.
      refuse("skipped", e.what());
      continue;
    }
    if (!run) {
      if (named) fail("--backend", b->name, " provides none of the functions this command runs");
      continue;  // `all`: a backend of other functions of the chapter
    }
    bool agrees = true;
    for (const auto& out : run->outputs) {
      const Output* want = find_output(expected, out.name);
      require(want != nullptr, "run_backends", "the reference has no output named ", out.name);
      const double error = max_abs_error(out.value, want->value);
      agrees = agrees && error <= want->tolerance;
      r.outputs.push_back({out.name, error, want->tolerance});
      dump.write(out.name + "_" + b->name, out.value);
    }
    r.status = agrees ? "agrees" : "disagrees";
    r.details = run->details;
    r.note = run->note;
    all_agree = all_agree && agrees;
    results.push_back(r);
  }

  // A non-zero exit status always says why, on stderr (whatever the format on stdout).
  for (const auto& r : results)
    for (const auto& o : r.outputs)
      if (!(o.max_abs_error_vs_ref <= o.tolerance))
        std::cerr << "tvlab: " << r.name << " disagrees with " << reference->name << " on " << o.name
                  << ": max |out - ref| = " << sci(o.max_abs_error_vs_ref, 3) << " > tolerance "
                  << sci(o.tolerance, 3) << "\n";
  if (report.json) {
    print_run_json(std::cout, report, results, dump.files());
    return all_agree ? 0 : 1;
  }
  std::cout << "\n" << report.title << " (max |out - ref|)\n";
  for (const auto& r : results) {
    std::cout << "  " << r.name << ":";
    if (!r.reason.empty()) {
      std::cout << " " << r.status << " (" << r.reason << ")\n";
      continue;
    }
    for (const auto& o : r.outputs)
      std::cout << (r.outputs.size() > 1 ? "  " + o.name + " " : " ") << sci(o.max_abs_error_vs_ref, 2);
    if (r.status == "disagrees") std::cout << "  DISAGREES";
    if (!r.note.empty()) std::cout << "  (" << r.note << ")";
    std::cout << "\n";
  }
  if (dump.enabled()) {
    std::cout << "wrote";
    for (const auto& f : dump.files()) std::cout << " " << f;
    std::cout << "\n";
  }
  return all_agree ? 0 : 1;
}

}  // namespace tvlab::cli

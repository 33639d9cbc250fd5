// The `tvlab` command: `tvlab list`, `tvlab tour`, and one subcommand per chapter.

#include <CLI/CLI.hpp>
#include <omp.h>

#include <iostream>

#include "common/walkthrough.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cli {

Chapter chapter_00();
Chapter chapter_01();
Chapter chapter_02();
Chapter chapter_04();

const std::vector<Chapter>& chapters() {
  static const std::vector<Chapter> all = {chapter_00(), chapter_01(), chapter_02(), chapter_04()};
  return all;
}

namespace {

int list() {
  std::cout << "tvlab chapters (run one with `tvlab <name> --step`; short names in brackets):\n\n";
  for (const auto& c : chapters()) std::cout << "  " << c.name << " [" << c.alias << "]\n      " << c.summary << "\n";
  return 0;
}

// Every chapter's documented examples: implementations' agreement, document numbers, errata.
int tour(const GlobalOptions& g) {
  bool ok = true;
  std::cout << "tvlab tour — CUDA: " << cuda::device_description() << "\n";
  for (const auto& c : chapters()) {
    const TourReport r = c.tour(g);
    int agree = 0, skipped = 0, reproduced = 0;
    for (const auto& a : r.agreements) {
      agree += a.ok() && !a.skipped;
      skipped += a.skipped;
    }
    for (const auto& d : r.checks) reproduced += d.agrees;
    std::cout << "\n" << c.name << ": " << c.summary << "\n"
              << "  implementations: " << agree << "/" << r.agreements.size() - static_cast<std::size_t>(skipped)
              << " agree with the reference" << (skipped ? " (" + std::to_string(skipped) + " skipped)" : "") << "\n"
              << "  document numbers: " << reproduced << " reproduced, " << r.checks.size() - static_cast<std::size_t>(reproduced)
              << " errata\n";
    for (const auto& a : r.agreements)
      if (!a.ok()) std::cout << "  DISAGREES: " << a.function << " [" << a.backend << "] " << a.example << ": max error "
                             << a.max_abs_error << " > " << a.tolerance << "\n";
    for (const auto& d : r.checks)
      if (!d.agrees) std::cout << "  erratum " << d.source << ": " << d.quantity << ": document \"" << d.document_says
                               << "\", computed " << d.computed << "\n";
    ok = ok && r.all_agree();
  }
  std::cout << "\n" << (ok ? "all chapters agree" : "SOME IMPLEMENTATIONS DISAGREE") << "\n";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tvlab::cli

int main(int argc, char** argv) {
  using namespace tvlab::cli;
  CLI::App app{"tvlab — Transformer Variants Lab: each component of a modern LLM as a readable reference, "
               "an optimized CPU version and a CUDA version, with tests that prove they agree."};
  app.require_subcommand(1);
  GlobalOptions global;
  app.add_option("--seed", global.seed, "seed of the deterministic random inputs")->capture_default_str();
  app.add_option("--format", global.format, "text | markdown | json")
      ->check(CLI::IsMember({"text", "markdown", "json"}))
      ->capture_default_str();
  app.add_option("--threads", global.threads, "OpenMP threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  app.parse_complete_callback([&global] {
    if (global.threads > 0) omp_set_num_threads(global.threads);
  });
  int status = 0;
  app.add_subcommand("list", "list the chapters")->callback([&] { status = list(); });
  app.add_subcommand("tour", "run every chapter's documented examples; non-zero exit if any implementation disagrees")
      ->callback([&] { status = tour(global); });
  for (const auto& c : chapters()) c.add_subcommand(app, global);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors are bad input too: one line, exit status 2.
    std::cerr << "tvlab: " << e.what() << " (see tvlab --help)\n";
    return 2;
  } catch (const tvlab::Error& e) {
    std::cerr << "tvlab: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tvlab: " << e.what() << "\n";
    return 2;
  }
  return status;
}

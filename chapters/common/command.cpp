// The one place (with tvlab_main.cpp) where the chapters' options meet CLI11.

#include "command.hpp"

#include <CLI/CLI.hpp>
#include <omp.h>

#include <iostream>

#include "tvlab/core/error.hpp"
#include "walkthrough.hpp"

namespace tvlab::cli {

namespace {

template <class T>
Command& bind(CLI::App& app, Command& self, const std::string& name, T& value, const std::string& help,
              ShowDefault show) {
  CLI::Option* option = app.add_option(name, value, help);
  if (show == ShowDefault::yes) option->capture_default_str();
  return self;
}

}  // namespace

Command& Command::option(const std::string& name, int& value, const std::string& help, ShowDefault show) {
  return bind(*app_, *this, name, value, help, show);
}
Command& Command::option(const std::string& name, long long& value, const std::string& help, ShowDefault show) {
  return bind(*app_, *this, name, value, help, show);
}
Command& Command::option(const std::string& name, double& value, const std::string& help, ShowDefault show) {
  return bind(*app_, *this, name, value, help, show);
}
Command& Command::option(const std::string& name, std::string& value, const std::string& help, ShowDefault show) {
  return bind(*app_, *this, name, value, help, show);
}

Command& Command::choice(const std::string& name, std::string& value, const std::vector<std::string>& allowed,
                         const std::string& help) {
  app_->add_option(name, value, help)->check(CLI::IsMember(allowed))->capture_default_str();
  return *this;
}

Command& Command::flag(const std::string& name, bool& value, const std::string& help) {
  app_->add_flag(name, value, help);
  return *this;
}

Command add_chapter_command(CommandLine& root, GlobalOptions& global, const std::string& name, const std::string& alias,
                            const std::string& description, StandardOptions& standard, const std::string& step_help,
                            const std::string& dump_help, std::vector<BackendLine> backends, std::function<int()> run) {
  CLI::App* sub = root.root().add_subcommand(name, description);
  sub->alias(alias);
  sub->fallthrough();  // --seed, --format, --threads of the root also work after the chapter name
  sub->add_flag("--step", standard.step, step_help);
  sub->add_option("--backend", standard.backend, "a registered backend (--backend list prints them) or all")
      ->capture_default_str();
  sub->add_flag_callback("--json", [&global] { global.format = "json"; }, "print the run as JSON (--format json)");
  sub->add_flag_callback("--markdown", [&global] { global.format = "markdown"; },
                         "print the chapter's documented results, its results.md (--format markdown)");
  sub->add_option("--dump", standard.dump, dump_help);
  sub->callback([run = std::move(run), backends = std::move(backends), &standard] {
    if (standard.backend == "list") {
      print_backend_list(std::cout, backends);
      return;
    }
    const int rc = run();
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
  return Command(*sub);
}

namespace {

// More threads than this is never faster, and OpenMP fails or crashes long before the limits of
// `int` (tens of thousands of threads): refuse them with a reason instead.
int max_threads() { return 4 * omp_get_num_procs(); }

}  // namespace

CommandLine::CommandLine(const std::string& description, GlobalOptions& global)
    : app_(std::make_unique<CLI::App>(description)), global_(global) {
  app_->require_subcommand(1);
  app_->add_option("--seed", global.seed, "seed of the deterministic random inputs")->capture_default_str();
  app_->add_option("--format", global.format, "text | markdown | json")
      ->check(CLI::IsMember({"text", "markdown", "json"}))
      ->capture_default_str();
  app_->add_option("--threads", global.threads,
                   "OpenMP threads, 0 = one per core (at most " + std::to_string(max_threads()) + ")");
  app_->parse_complete_callback([&global] {
    require(global.threads >= 0 && global.threads <= max_threads(), "--threads",
            "must be between 0 (one thread per core) and ", max_threads(), " (4 per core, with ", omp_get_num_procs(),
            " cores here), not ", global.threads);
    if (global.threads > 0) omp_set_num_threads(global.threads);
  });
}

CommandLine::~CommandLine() = default;

Command CommandLine::subcommand(const std::string& name, const std::string& description, std::function<int()> run) {
  CLI::App* sub = app_->add_subcommand(name, description);
  sub->callback([this, run = std::move(run)] { status_ = run(); });
  return Command(*sub);
}

CLI::App& CommandLine::root() { return *app_; }

int CommandLine::run(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a chapter's run returned a non-zero status
    return e.get_exit_code();
  } catch (const CLI::CallForHelp& e) {
    return app_->exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app_->exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors are bad input too: one line, exit status 2.
    std::cerr << "tvlab: " << e.what() << " (see tvlab --help)\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << "tvlab: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tvlab: " << e.what() << "\n";
    return 2;
  }
  return status_;
}

}  // namespace tvlab::cli

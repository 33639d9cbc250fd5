// The one place (with tvlab_main.cpp) where the chapters' options meet CLI11.

#include "command.hpp"

#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iostream>
#include <new>

#include "tvlab/core/error.hpp"
#include "run_cost.hpp"
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
  bind(*app_, *this, name, value, help, show);
  // An empty value is never meant (`--svg ""` would silently draw nothing).
  app_->get_option(name)->check(
      CLI::Validator([](std::string& text) { return text.empty() ? std::string("needs a value, not ''") : ""; },
                     "", "non-empty"));
  return *this;
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

namespace {

// --json, --markdown and --format name one output format: two different ones are an error.
void choose_format(GlobalOptions& global, const StandardOptions& standard, bool format_given) {
  std::vector<std::string> asked;
  if (format_given) asked.push_back("--format " + global.format);
  if (standard.json) asked.push_back("--json");
  if (standard.markdown) asked.push_back("--markdown");
  const std::string wanted = standard.json ? "json" : standard.markdown ? "markdown" : global.format;
  const bool conflict = (standard.json && standard.markdown) || (format_given && wanted != global.format);
  if (conflict) fail(asked[1], "asks for another output format than ", asked[0], ": give one of them");
  global.format = wanted;
}

}  // namespace

Command add_chapter_command(CommandLine& root, GlobalOptions& global, const std::string& name, const std::string& alias,
                            const std::string& description, StandardOptions& standard, const std::string& step_help,
                            const std::string& dump_help, std::vector<BackendLine> backends, std::function<int()> run) {
  CLI::App* sub = root.root().add_subcommand(name, description);
  sub->alias(alias);
  sub->fallthrough();  // --seed, --format, --threads of the root also work after the chapter name
  sub->add_flag("--step", standard.step, step_help);
  sub->add_option("--backend", standard.backend, "a registered backend (--backend list prints them) or all")
      ->capture_default_str();
  sub->add_flag("--json", standard.json, "print the run as JSON (--format json)");
  sub->add_flag("--markdown", standard.markdown,
                "print the chapter's documented results, its results.md (--format markdown)");
  Command command(*sub);
  command.option("--dump", standard.dump, dump_help, ShowDefault::no);
  command.option("--load", standard.load,
                 "read the inputs from DIR/<name>.npy (the names --dump writes; float32 or float64) instead of "
                 "drawing them from --seed; the sizes come from the arrays",
                 ShowDefault::no);
  standard.given = [sub](const std::string& option) { return sub->count(option) > 0; };
  sub->callback([run = std::move(run), backends = std::move(backends), &standard, &global, sub] {
    if (standard.backend == "list") {
      print_backend_list(std::cout, backends);
      return;
    }
    choose_format(global, standard, sub->get_parent()->count("--format") > 0);
    require(!standard.step || global.format == "text", "--step",
            "prints the steps as text: it cannot be combined with --json or --markdown");
    // A backend asked for by name must exist and be able to run here: say so before anything is
    // computed or written (--dump).
    if (standard.backend != "all") {
      const auto named = std::find_if(backends.begin(), backends.end(),
                                      [&](const BackendLine& b) { return b.name == standard.backend; });
      if (named == backends.end()) throw_unknown_backend(standard.backend, backend_names(backends));
      if (const auto reason = unavailable_reason(named->caps))
        fail("--backend", named->name, " cannot run: ", *reason);
    }
    const int rc = run();
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
  return command;
}

namespace {

// More threads than this is never faster, and OpenMP fails or crashes long before the limits of
// `int` (tens of thousands of threads): refuse them with a reason instead.
int max_threads() { return 4 * omp_get_num_procs(); }

}  // namespace

namespace {

// The root options that take a value (the next argument, or after '=').
const char* const kRootOptionsWithValue[] = {"--seed", "--format", "--threads", "--max-memory", "--time-limit"};

// --seed: a whole number from 0 to 2^64 - 1 (CLI11 would wrap -1 around, or clamp 2^64 + 1).
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t seed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
  require(!text.empty() && error == std::errc() && end == text.data() + text.size(), "--seed", "('", text,
          "') must be a whole number from 0 to 18446744073709551615");
  return seed;
}

}  // namespace

CommandLine::CommandLine(const std::string& description, GlobalOptions& global)
    : app_(std::make_unique<CLI::App>(description)), global_(global) {
  app_->require_subcommand(1);
  auto seed_text = std::make_shared<std::string>(std::to_string(global.seed));
  auto max_memory_text = std::make_shared<std::string>("0");
  app_->add_option("--seed", *seed_text, "seed of the deterministic random inputs (0 to 2^64 - 1)")
      ->capture_default_str();
  app_->add_option("--format", global.format, "text | markdown | json")
      ->check(CLI::IsMember({"text", "markdown", "json"}))
      ->capture_default_str();
  app_->add_option("--threads", global.threads,
                   "OpenMP threads, 0 = one per core (at most " + std::to_string(max_threads()) + ")");
  app_->add_option("--max-memory", *max_memory_text,
                   "refuse runs that need more memory than this (512M, 8G; 0 = the memory available now)")
      ->capture_default_str();
  app_->add_option("--time-limit", global.time_limit,
                   "refuse runs whose loop reference needs longer than this many seconds (estimated at "
                   "1e9 multiply-adds a second)")
      ->capture_default_str();
  app_->parse_complete_callback([&global, seed_text, max_memory_text] {
    global.seed = parse_seed(*seed_text);
    global.max_memory_bytes = parse_memory_size("--max-memory", *max_memory_text);
    require(global.threads >= 0 && global.threads <= max_threads(), "--threads",
            "must be between 0 (one thread per core) and ", max_threads(), " (4 per core, with ", omp_get_num_procs(),
            " cores here), not ", global.threads);
    require(std::isfinite(global.time_limit) && global.time_limit > 0, "--time-limit", "(", global.time_limit,
            ") must be a positive number of seconds");
    if (global.threads > 0) omp_set_num_threads(global.threads);
  });
}

CommandLine::~CommandLine() = default;

Command CommandLine::subcommand(const std::string& name, const std::string& description, std::function<int()> run) {
  CLI::App* sub = app_->add_subcommand(name, description);
  sub->fallthrough();  // the root's options work after `list` and `tour` too
  sub->callback([this, run = std::move(run)] { status_ = run(); });
  return Command(*sub);
}

CLI::App& CommandLine::root() { return *app_; }

void CommandLine::require_known_subcommand(int argc, char** argv) const {
  // The first argument that is neither an option nor an option's value names the subcommand.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("-", 0) == 0) {
      const bool takes_value = std::find(std::begin(kRootOptionsWithValue), std::end(kRootOptionsWithValue), arg) !=
                               std::end(kRootOptionsWithValue);
      if (takes_value) ++i;
      continue;
    }
    std::string names;
    for (const CLI::App* sub : app_->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->check_name(arg)) return;
      names += (names.empty() ? "" : ", ") + sub->get_name() +
               (sub->get_aliases().empty() ? "" : " (" + sub->get_aliases().front() + ")");
    }
    throw Error("unknown chapter or command '" + arg + "': the commands are " + names);
  }
}

int CommandLine::run(int argc, char** argv) {
  try {
    require_known_subcommand(argc, argv);
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
  } catch (const std::bad_alloc&) {
    // RunCost refuses what the machine cannot hold before allocating; this is the safety net.
    std::cerr << "tvlab: out of memory: use smaller sizes, or --max-memory to be told before a run starts\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tvlab: " << e.what() << "\n";
    return 2;
  }
  return status_;
}

}  // namespace tvlab::cli

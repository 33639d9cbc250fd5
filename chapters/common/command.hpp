#pragma once
/// @file
/// A chapter's subcommand as the chapter sees it: named options bound to variables, with help.
///
/// The command line is parsed by CLI11, a header-only library whose templates are compiled
/// again in every source that declares an option. The chapters declare theirs through this
/// small class instead, so CLI11 is compiled once (command.cpp, tvlab_main.cpp) however many
/// chapters there are.

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tvlab::cli {

/// Whether `--help` shows an option's default value.
enum class ShowDefault { yes, no };

/// Options of one (sub)command. Each call binds `--name VALUE` to a variable that must outlive
/// the parse (the chapters keep their options in a shared struct captured by the command's run).
class Command {
 public:
  explicit Command(CLI::App& app) : app_(&app) {}

  /// `--name VALUE`: a whole number, a real number or text.
  Command& option(const std::string& name, int& value, const std::string& help, ShowDefault show = ShowDefault::yes);
  Command& option(const std::string& name, long long& value, const std::string& help,
                  ShowDefault show = ShowDefault::yes);
  Command& option(const std::string& name, double& value, const std::string& help, ShowDefault show = ShowDefault::yes);
  Command& option(const std::string& name, std::string& value, const std::string& help,
                  ShowDefault show = ShowDefault::yes);
  /// `--name VALUE` where VALUE must be one of `allowed` (anything else is a usage error).
  Command& choice(const std::string& name, std::string& value, const std::vector<std::string>& allowed,
                  const std::string& help);
  /// `--name`: sets `value` to true.
  Command& flag(const std::string& name, bool& value, const std::string& help);

 private:
  CLI::App* app_;
};

struct GlobalOptions;

/// The root command `tvlab`: the global options (--seed, --format, --threads), then one subcommand
/// each for `list`, `tour` and every chapter.
class CommandLine {
 public:
  CommandLine(const std::string& description, GlobalOptions& global);
  ~CommandLine();

  /// Adds `tvlab <name>`; `run` runs when it is chosen and returns the exit status.
  Command subcommand(const std::string& name, const std::string& description, std::function<int()> run);
  /// The CLI11 object underneath (for add_chapter_command).
  CLI::App& root();

  /// Parses and runs the chosen subcommand. Returns its exit status; a usage error or a
  /// tvlab::Error is one line on stderr and exit status 2; --help prints the help and returns 0.
  int run(int argc, char** argv);

 private:
  /// Throws tvlab::Error "unknown chapter or command 'foo': the commands are ..." (CLI11 would say
  /// "A subcommand is required").
  void require_known_subcommand(int argc, char** argv) const;

  std::unique_ptr<CLI::App> app_;
  GlobalOptions& global_;
  int status_ = 0;
};

}  // namespace tvlab::cli

#include "run_cost.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "tvlab/core/error.hpp"
#include "walkthrough.hpp"

namespace tvlab::cli {

std::optional<std::uint64_t> checked_product(std::initializer_list<std::uint64_t> dims) {
  std::uint64_t product = 1;
  for (const std::uint64_t d : dims)
    if (__builtin_mul_overflow(product, d, &product)) return std::nullopt;
  return product;
}

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes) || bytes >= 1e18) return "more than 1 EB";
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 5) {
    bytes /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

std::uint64_t parse_memory_size(const std::string& option, const std::string& text) {
  // A number, then an optional suffix k, M, G, T (powers of 1024, as `free -h` prints them).
  std::size_t end = 0;
  double value = -1;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  const std::string suffix = text.substr(end);
  double scale = 0;
  if (suffix.empty() || suffix == "B") scale = 1;
  if (suffix == "k" || suffix == "K") scale = 1024.0;
  if (suffix == "M") scale = 1024.0 * 1024;
  if (suffix == "G") scale = 1024.0 * 1024 * 1024;
  if (suffix == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = value * scale;
  require(end > 0 && scale > 0 && std::isfinite(bytes) && bytes >= 0 && bytes < 1.8e19, option, "('", text,
          "') must be a size such as 512M, 8G or 0 (the memory available now)");
  return static_cast<std::uint64_t>(bytes);
}

std::uint64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kilobytes = 0;
  std::string unit;
  while (meminfo >> key >> kilobytes >> unit)
    if (key == "MemAvailable:") return kilobytes * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size)
                                    : std::numeric_limits<std::uint64_t>::max();
}

namespace {

// "about 4.3 GB", or "more than 1 EB" for a size that is not a number any more.
std::string approximately(double bytes) {
  return (std::isfinite(bytes) && bytes < 1e18 ? "about " : "") + format_bytes(bytes);
}

double amount_of(std::initializer_list<std::uint64_t> dims, std::uint64_t per_element) {
  const auto count = checked_product(dims);
  if (!count) return std::numeric_limits<double>::infinity();
  return static_cast<double>(*count) * static_cast<double>(per_element);
}

// The options a `--load` sets from the arrays' shapes (size_from_load) instead of the command line.
bool set_by_load(const std::string& option, const StandardOptions& standard) {
  static const char* const kSizes[] = {"--heads", "--seq", "--seq-k", "--head-dim", "--tokens", "--d-model", "--d-ff"};
  return !standard.load.empty() && std::find(std::begin(kSizes), std::end(kSizes), option) != std::end(kSizes);
}

// The option a refusal names, and what it advises: the size option itself, or --load when the
// loaded arrays set that size.
struct Blame {
  std::string option, remedy;
};
Blame blame(const std::string& option, const StandardOptions& standard) {
  if (set_by_load(option, standard))
    return {"--load", "load smaller arrays (theirs set " + option + ")"};
  return {option, "make " + option + " smaller"};
}

}  // namespace

RunCost& RunCost::memory(const std::string& what, std::initializer_list<std::uint64_t> dims,
                         std::uint64_t bytes_per_element, const std::string& option) {
  memory_.push_back({what, option, amount_of(dims, bytes_per_element)});
  return *this;
}

RunCost& RunCost::work(const std::string& what, std::initializer_list<std::uint64_t> dims, const std::string& option,
                       double times) {
  work_.push_back({what, option, times * amount_of(dims, 1)});
  return *this;
}

double backends_work_factor(const std::string& selection, std::size_t backends) {
  const double others = selection == "all" ? static_cast<double>(backends) - 1.0 : 1.0;
  return 1.0 + 0.5 * others;
}

void RunCost::require_affordable(const GlobalOptions& global, const StandardOptions& standard) const {
  const auto largest = [](const std::vector<Part>& parts) {
    return *std::max_element(parts.begin(), parts.end(),
                             [](const Part& a, const Part& b) { return a.amount < b.amount; });
  };
  if (!memory_.empty()) {
    double total = 0;
    for (const auto& p : memory_) total += p.amount;
    const bool limited = global.max_memory_bytes > 0;
    const double limit = static_cast<double>(limited ? global.max_memory_bytes : available_memory());
    if (total > limit) {
      const Part& big = largest(memory_);
      const Blame b = blame(big.option, standard);
      fail(b.option, "this run needs ", approximately(total), " of memory (", big.what, ": ",
           approximately(big.amount), "), more than the ", format_bytes(limit),
           limited ? " --max-memory allows" : " this machine has available", ": ", b.remedy);
    }
  }
  if (!work_.empty()) {
    double total = 0;
    for (const auto& p : work_) total += p.amount;
    const double seconds = total / loop_speed;
    if (seconds > global.time_limit) {
      const Part& big = largest(work_);
      const Blame b = blame(big.option, standard);
      std::ostringstream estimate;
      estimate.precision(2);
      estimate << total << " multiply-adds (" << big.what << ")";
      fail(b.option, "this run needs about ", estimate.str(), ", about ",
           std::isfinite(seconds) && seconds < 1e7 ? std::to_string(static_cast<long long>(seconds)) + " s"
                                                   : std::string("forever"),
           " for the loop reference, more than --time-limit (", global.time_limit, " s): ", b.remedy,
           " or raise --time-limit");
    }
  }
}

}  // namespace tvlab::cli

#pragma once
/// @file
/// What a command will cost, estimated from its options before it allocates anything: the bytes
/// of the tensors it makes and the multiply-adds of its slowest code (the loop reference). A run
/// that would not fit in the machine's memory, or would take longer than the time limit, is
/// refused with one line naming the option to change, instead of a `std::bad_alloc` or minutes of
/// silence.
///
/// Sizes are multiplied with overflow checks: a product that does not fit in 64 bits is "too
/// large" (and refused), never a wrapped-around small number.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace tvlab::cli {

struct GlobalOptions;
struct StandardOptions;

/// The product of `dims`, or nothing when it does not fit in 64 bits.
std::optional<std::uint64_t> checked_product(std::initializer_list<std::uint64_t> dims);

/// "4.3 GB", "512 B", or "more than 1 EB".
std::string format_bytes(double bytes);

/// Parses a memory size: "0" (no limit but the machine's), "512M", "8G", "1.5T", "1000000" (bytes).
/// Throws tvlab::Error naming `option` for anything else.
std::uint64_t parse_memory_size(const std::string& option, const std::string& text);

/// The memory this process may still take: MemAvailable of /proc/meminfo (or the free physical
/// pages where there is no /proc), in bytes.
std::uint64_t available_memory();

/// How many times the reference's work a command running `backends` costs: the reference, and
/// about half of it for each other backend (the optimized versions are faster, but not at the
/// tiny head dimensions of a walkthrough, where their tiles are mostly overhead). `selection` is
/// --backend: `all` runs every one, a name runs the reference and that one.
double backends_work_factor(const std::string& selection, std::size_t backends);

/// What one exponential costs in loop code, counted in multiply-adds (a score of attention costs
/// 2 d for its two dot products plus this).
inline constexpr std::uint64_t kExpCost = 20;

class RunCost {
 public:
  /// `dims` elements of `bytes_per_element` bytes each, for `what` ("the scores S and P"), whose
  /// size `option` ("--seq") sets.
  RunCost& memory(const std::string& what, std::initializer_list<std::uint64_t> dims, std::uint64_t bytes_per_element,
                  const std::string& option);
  /// `times` x the product of `dims` multiply-adds in loop code, for `what`, whose count `option` sets.
  RunCost& work(const std::string& what, std::initializer_list<std::uint64_t> dims, const std::string& option,
                double times = 1.0);

  /// Throws tvlab::Error naming the option of the largest part when the memory exceeds
  /// `--max-memory` (default: the memory available now) or the work exceeds `--time-limit`
  /// seconds at the assumed speed of loop code. With `--load` (`standard.load`), a size that the
  /// loaded arrays set (`--seq`, `--heads`, ...) is named as `--load`, the option the user gave.
  void require_affordable(const GlobalOptions& global, const StandardOptions& standard) const;

  /// Multiply-adds per second assumed for loop code (a scalar reference loop on one core).
  static constexpr double loop_speed = 1e9;

 private:
  struct Part {
    std::string what, option;
    double amount = 0.0;  ///< bytes or multiply-adds; +inf when the product overflowed
  };
  std::vector<Part> memory_, work_;
};

}  // namespace tvlab::cli

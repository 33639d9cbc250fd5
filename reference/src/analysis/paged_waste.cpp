#include "tvlab/analysis/paged_waste.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {

std::size_t paged_slots(std::size_t length, std::size_t block_size) {
  require_positive("paged_slots", "block_size", block_size);
  // ceil(L / b) b, without forming L + b - 1 (which could wrap around)
  const std::size_t blocks = length / block_size + (length % block_size != 0 ? 1 : 0);
  require(blocks <= std::numeric_limits<std::size_t>::max() / block_size, "paged_slots", "length (", length,
          ") rounded up to whole blocks of block_size (", block_size, ") exceeds the range of size_t");
  return blocks * block_size;
}

std::size_t last_block_waste(std::size_t length, std::size_t block_size) {
  require_positive("last_block_waste", "block_size", block_size);
  return paged_slots(length, block_size) - length;
}

namespace {

void validate_distribution(const char* function, const char* name, const TokenCountDistribution& d) {
  require(d.min >= 1, function, name, ".min (", d.min, ") must be at least 1");
  require(d.min <= d.max, function, name, ".min (", d.min, ") must not exceed ", name, ".max (", d.max, ")");
  if (d.kind == LengthDistribution::log_normal) {
    require(std::isfinite(d.median) && d.median > 0, function, name, ".median (", d.median,
            ") must be positive and finite");
    require(std::isfinite(d.sigma) && d.sigma >= 0, function, name, ".sigma (", d.sigma,
            ") must be finite and non-negative");
  }
}

std::size_t draw(Rng& rng, const TokenCountDistribution& d) {
  if (d.kind == LengthDistribution::uniform) {
    // An integer uniform in [min, max]: floor(min + u (max - min + 1)), u in [0, 1).
    const double span = static_cast<double>(d.max - d.min + 1);
    return std::min(d.max, d.min + static_cast<std::size_t>(rng.uniform() * span));
  }
  // round(exp(ln median + sigma z)), clamped to [min, max]
  const double x = std::exp(std::log(d.median) + d.sigma * rng.normal());
  const double clamped = std::clamp(std::round(x), static_cast<double>(d.min), static_cast<double>(d.max));
  // A max near 2^64 rounds up as a double, and converting 2^64 back is undefined: stop at max.
  if (clamped >= static_cast<double>(d.max)) return d.max;
  return static_cast<std::size_t>(clamped);
}

}  // namespace

std::vector<Request> sample_requests(const WorkloadConfig& cfg) {
  const char* fn = "sample_requests";
  require_positive(fn, "cfg.num_requests", cfg.num_requests);
  validate_distribution(fn, "cfg.prompt", cfg.prompt);
  validate_distribution(fn, "cfg.output", cfg.output);
  Rng rng(cfg.seed);
  std::vector<Request> requests(cfg.num_requests);
  for (Request& r : requests) {
    r.prompt_len = draw(rng, cfg.prompt);
    r.output_len = draw(rng, cfg.output);
  }
  return requests;
}

KvWasteReport kv_waste(const std::vector<Request>& requests, std::size_t max_len, std::size_t block_size) {
  const char* fn = "kv_waste";
  require(!requests.empty(), fn, "requests is empty");
  require_positive(fn, "max_len", max_len);
  require_positive(fn, "block_size", block_size);
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const Request& q = requests[r];
    require(q.output_len >= 1, fn, "requests[", r, "] has output_len 0: a request generates at least one token");
    // Compared without forming prompt + output, which could wrap around.
    require(q.prompt_len <= max_len && q.output_len <= max_len - q.prompt_len, fn, "requests[", r,
            "] has length ", static_cast<double>(q.prompt_len) + static_cast<double>(q.output_len), " (prompt ",
            q.prompt_len, " + output ", q.output_len, "), more than max_len (", max_len, ")");
  }
  KvWasteReport report{.requests = requests.size(), .max_len = max_len, .block_size = block_size};
  for (const Request& q : requests) {
    const double length = static_cast<double>(q.length()), outputs = static_cast<double>(q.output_len);
    report.used_slots += length;
    report.preallocated_slots += static_cast<double>(max_len);
    report.paged_slots += static_cast<double>(paged_slots(q.length(), block_size));
    // o L_max and o L: a reservation is held through all o decode steps.
    report.preallocated_slot_steps += outputs * static_cast<double>(max_len);
    report.exact_slot_steps += outputs * length;
    // After decode step j the cache holds p + j tokens, in ceil((p + j) / b) blocks.
    for (std::size_t j = 1; j <= q.output_len; ++j) {
      report.used_slot_steps += static_cast<double>(q.prompt_len + j);
      report.paged_slot_steps += static_cast<double>(paged_slots(q.prompt_len + j, block_size));
    }
  }
  report.mean_length = report.used_slots / static_cast<double>(requests.size());
  return report;
}

}  // namespace tvlab::analysis

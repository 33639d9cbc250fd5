#pragma once
/// @file
/// Chapter 05: how much KV cache memory a serving system reserves but does not fill, with and
/// without pages. A request of prompt length \f$ p \f$ and output length \f$ o \f$ ends with
/// \f$ L = p + o \f$ tokens in the cache.
/// - **Preallocation** (FasterTransformer, Orca): the system does not know \f$ o \f$ in advance and
///   reserves a contiguous buffer of the model's maximum length \f$ L_{max} \f$ per request; the
///   waste is \f$ L_{max} - L \f$ at the end, and more during generation (slots reserved for tokens
///   not generated yet). Reserving exactly \f$ L \f$ (an oracle that knows \f$ o \f$; Orca (Oracle) in
///   the vLLM paper) removes the waste at the end but not during generation.
/// - **Paging** (vLLM, Kwon et al. 2023): blocks of \f$ b \f$ tokens are taken as the sequence
///   grows, so it holds \f$ \lceil L/b \rceil\, b \f$ slots and wastes only the unused slots of its
///   last block, \f$ \lceil L/b \rceil\, b - L \le b - 1 \f$: \f$ (b - 1)/2 \f$ on average when \f$ L \bmod b \f$
///   is uniform.
///
/// The vLLM paper reports that existing systems use only 20.4%–38.2% of their KV cache memory for
/// token states (a waste of 60–80%) and that vLLM wastes under 4%. This model counts reservation and
/// internal fragmentation (not the allocator's external fragmentation): the waste of preallocation
/// at the end is \f$ 1 - \bar L / L_{max} \f$, 60–80% for \f$ \bar L \f$ between 20% and 40% of \f$ L_{max} \f$
/// (ShareGPT-like requests, \f$ \bar L \approx 500 \f$, against OPT's \f$ L_{max} = 2048 \f$: 76%); paged waste
/// is about \f$ \tfrac{(b-1)/2}{\bar L + (b-1)/2} \f$, under 4% for \f$ b = 16 \f$ once \f$ \bar L > 180 \f$ tokens.
/// @ingroup ch05

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tvlab::analysis {

/// Slots a sequence of `length` tokens holds in blocks of `block_size`:
/// \f$ \lceil L/b \rceil\, b \f$ (`block_size` >= 1).
std::size_t paged_slots(std::size_t length, std::size_t block_size);

/// The unused slots of the last block, \f$ \lceil L/b \rceil\, b - L \in [0, b - 1] \f$.
std::size_t last_block_waste(std::size_t length, std::size_t block_size);

/// One request of a workload.
struct Request {
  std::size_t prompt_len = 0;  ///< \f$ p \f$: tokens of the prompt (prefilled at once)
  std::size_t output_len = 0;  ///< \f$ o \f$: tokens generated, one per decode step
  /// \f$ L = p + o \f$: the tokens in the cache at the end.
  std::size_t length() const { return prompt_len + output_len; }
};

/// The shape of a distribution of token counts.
enum class LengthDistribution {
  uniform,     ///< integers uniform in [min, max]
  /// \f$ \mathrm{round}(e^{\ln(\text{median}) + \sigma z}) \f$, \f$ z \sim N(0, 1) \f$, clamped to
  /// [min, max]: many short requests and a few long ones
  log_normal,
};

/// A distribution of token counts (prompt or output lengths).
struct TokenCountDistribution {
  LengthDistribution kind = LengthDistribution::uniform;
  std::size_t min = 1;  ///< smallest count (uniform: the range's start; log-normal: the clamp)
  std::size_t max = 1;  ///< largest count
  double median = 1;    ///< log-normal only: \f$ e^{\mu} \f$
  double sigma = 1;     ///< log-normal only: \f$ \sigma \ge 0 \f$ of \f$ \ln \f$ of the count
};

/// A seeded workload: `num_requests` requests whose prompt and output lengths are drawn
/// independently.
struct WorkloadConfig {
  std::size_t num_requests = 1000;
  TokenCountDistribution prompt;
  TokenCountDistribution output;
  std::uint64_t seed = 0;
};

/// @ingroup ch05
/// Draws the requests of `cfg` with `tvlab::Rng` (the same on every platform). Throws
/// `tvlab::Error` naming the field: num_requests = 0, min = 0 or min > max, a log-normal median
/// that is not positive or a negative sigma.
std::vector<Request> sample_requests(const WorkloadConfig& cfg);

/// KV cache slots (one slot = one token's keys and values in every layer and head) reserved and
/// used, in two measures: at the end of every request, and summed over every decode step of
/// every request (slot-steps: the memory held over time when each step takes the same time).
struct KvWasteReport {
  std::size_t requests = 0, max_len = 0, block_size = 0;
  double mean_length = 0;  ///< \f$ \bar L \f$

  // At the end of each request.
  double used_slots = 0;           ///< \f$ \sum_r L_r \f$
  double preallocated_slots = 0;   ///< \f$ R\, L_{max} \f$
  double paged_slots = 0;          ///< \f$ \sum_r \lceil L_r / b \rceil b \f$

  // Over time: after decode step \f$ j = 1..o \f$ the cache holds \f$ p + j \f$ tokens.
  double used_slot_steps = 0;          ///< \f$ \sum_r \sum_{j=1}^{o_r} (p_r + j) \f$
  double preallocated_slot_steps = 0;  ///< \f$ \sum_r o_r L_{max} \f$
  double exact_slot_steps = 0;         ///< \f$ \sum_r o_r L_r \f$: an oracle reserves exactly \f$ L_r \f$
  double paged_slot_steps = 0;         ///< \f$ \sum_r \sum_{j} \lceil (p_r + j)/b \rceil b \f$

  /// \f$ 1 - \text{used}/\text{preallocated} \f$ at the end: \f$ 1 - \bar L / L_{max} \f$.
  double preallocated_waste() const { return 1.0 - used_slots / preallocated_slots; }
  /// \f$ 1 - \text{used}/\text{paged} \f$ at the end: the last blocks' unused slots.
  double paged_waste() const { return 1.0 - used_slots / paged_slots; }
  /// The mean unused slots of a request's last block, \f$ \approx (b - 1)/2 \f$.
  double mean_last_block_waste() const { return (paged_slots - used_slots) / static_cast<double>(requests); }
  /// Over time, preallocating \f$ L_{max} \f$.
  double preallocated_waste_over_time() const { return 1.0 - used_slot_steps / preallocated_slot_steps; }
  /// Over time, reserving exactly \f$ L_r \f$: the slots of tokens not generated yet.
  double exact_waste_over_time() const { return 1.0 - used_slot_steps / exact_slot_steps; }
  /// Over time, paged.
  double paged_waste_over_time() const { return 1.0 - used_slot_steps / paged_slot_steps; }
};

/// @ingroup ch05
/// The reserved and used slots of `requests` (at least one, each with \f$ 1 \le L_r \le L_{max} \f$
/// and at least one output token) for a maximum length `max_len` and blocks of `block_size`.
/// Throws `tvlab::Error` naming `requests` (the first bad one by index), `max_len` or `block_size`.
KvWasteReport kv_waste(const std::vector<Request>& requests, std::size_t max_len, std::size_t block_size);

}  // namespace tvlab::analysis

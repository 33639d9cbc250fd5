#pragma once
/// @file
/// Chapter 05, the paged KV cache of vLLM (Kwon et al. 2023, "Efficient Memory Management for Large
/// Language Model Serving with PagedAttention"): the keys and values of every sequence live in
/// fixed-size *blocks* of `block_size` token slots taken from one shared pool, the way an operating
/// system gives a process pages of memory. Each sequence owns a *block table* that maps its logical
/// block \f$ \lfloor t / b \rfloor \f$ (token \f$ t \f$, block size \f$ b \f$) to a physical block of the
/// pool, so a sequence grows one block at a time and wastes at most \f$ b - 1 \f$ slots (in its last
/// block) instead of a reservation for the longest possible output.
///
/// Blocks carry reference counts so that sequences can share them: `fork` gives a child sequence
/// the parent's table (parallel sampling, beam search, a shared prompt prefix) without copying
/// anything, and the first append to a shared last block copies it first (copy-on-write), exactly
/// as the paper's Section 4.4 describes.
///
/// The pool may hold the keys and values in a narrower format than float, chosen once for the
/// whole cache (`PagedKvConfig::storage`) and applied as each token is appended, as vLLM's
/// `kv_cache_dtype="fp8"` writes each new token's codes into its block: bf16 (the top 16 bits of
/// the float, rounded to nearest even), or INT8 or FP8 E4M3 codes with one float scale per token and
/// kv head, computed from the token itself (vLLM's FP8 scales are per tensor or per kv head,
/// calibrated beforehand; per token needs no calibration and follows the per-token conventions of
/// `tvlab/core/kv_quant.hpp`: \f$ s = \max_c |x_c| / 127 \f$, \f$ q = \mathrm{round}(x / s) \f$ for
/// INT8; \f$ s = \max_c |x_c| / 448 \f$, \f$ q = \mathrm{e4m3}(x / s) \f$ for E4M3; \f$ \hat x = s\,q \f$).
/// Blocks, tables, forks and copy-on-write work the same whatever the storage: a block's codes and
/// scales travel together.
/// @ingroup ch05

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// How a paged cache stores each key and value element.
enum class PagedKvStorage {
  fp32,      ///< float, 4 bytes (the default)
  bf16,      ///< bf16 bits, 2 bytes, read back exactly by a 16-bit shift
  int8,      ///< symmetric INT8 code (1 byte) + one float scale per token and kv head
  fp8_e4m3,  ///< OCP FP8 E4M3 code (1 byte) + one float scale per token and kv head
};

/// "fp32", "bf16", "int8" or "fp8_e4m3", for labels and messages.
const char* storage_name(PagedKvStorage storage);

/// @ingroup ch05
/// The bytes one token costs in a paged cache of `num_kv_heads` heads of `head_dim`, keys and
/// values together: \f$ 2\,g\,d\,B \f$ for B-byte elements (4 for fp32, 2 for bf16), and
/// \f$ 2\,g\,(d + 4) \f$ for INT8 and FP8 (a byte per element, a float scale per token and head).
std::size_t paged_kv_bytes_per_token(PagedKvStorage storage, std::size_t num_kv_heads, std::size_t head_dim);

/// The sizes of a paged KV cache (the names of vLLM's `CacheConfig` and of Hugging Face configs).
struct PagedKvConfig {
  std::size_t num_blocks = 0;    ///< physical blocks in the pool
  std::size_t block_size = 16;   ///< \f$ b \f$: token slots per block (vLLM's default is 16)
  std::size_t num_kv_heads = 0;  ///< \f$ g \f$: key/value heads stored per token
  std::size_t head_dim = 0;      ///< \f$ d_k \f$: elements of one head's key (and value)
  PagedKvStorage storage = PagedKvStorage::fp32;  ///< the format of the pool's elements
};

/// Checks `cfg` for `function`: every size at least 1, a storage of the enum. Throws `tvlab::Error`
/// naming the field (`cfg.block_size`, ..., `cfg.storage`).
void validate_paged_kv_config(const char* function, const PagedKvConfig& cfg);

/// A sequence's handle in a `PagedKvCache` (given out in increasing order from 0, never reused).
using SequenceId = std::uint64_t;

/// @ingroup ch05
/// A pool of `num_blocks` blocks, each holding keys and values of `block_size` tokens for
/// `num_kv_heads` heads of `head_dim` elements, with a free list, one block table per sequence and
/// one reference count per block.
///
/// The pool is two tensors `[num_blocks, num_kv_heads, block_size, head_dim]` (keys and values):
/// token \f$ t \f$ of a sequence with table \f$ T \f$ sits in block \f$ T[\lfloor t/b \rfloor] \f$, slot
/// \f$ t \bmod b \f$. Slots never written hold NaN, so that a kernel reading past a sequence's length
/// shows it in its output. In the narrow formats the pool holds the bits of each element
/// (`[num_blocks, num_kv_heads, block_size, head_dim]`, row-major as the float pool) and, for INT8
/// and FP8, a scale per slot (`[num_blocks, num_kv_heads, block_size]`); unwritten slots hold
/// bf16's NaN, or a NaN scale (and E4M3's NaN code).
///
/// Every member function checks its arguments first and throws `tvlab::Error` naming the parameter;
/// a function that throws leaves the cache exactly as it was (tables, lengths, reference counts,
/// the free list and the pool's contents).
class PagedKvCache {
 public:
  /// An empty cache: every block free, no sequence.
  explicit PagedKvCache(const PagedKvConfig& cfg);

  /// Starts a new, empty sequence (no block yet) and returns its id.
  SequenceId add_sequence();

  /// Appends one token's key `k_t` and value `v_t`, both `[num_kv_heads, head_dim]` and finite, to
  /// sequence `seq`, in the cache's storage (rounded to bf16, or quantized with one scale per kv
  /// head; in bf16 a value that would round to infinity is an error naming it). When the last block is full (or there is none) a free block is taken; when the last
  /// block is shared (reference count > 1) it is copied into a free block first and the sequence's
  /// table points at the copy (copy-on-write), so the other sequences never see the write.
  void append(SequenceId seq, const Tensor2& k_t, const Tensor2& v_t);

  /// Appends `n` tokens at once (a prompt): `k` and `v` are `[num_kv_heads, n, head_dim]`, as the
  /// attention tensors of the other chapters. Either every token is stored or, when the pool lacks
  /// the blocks, none.
  void append(SequenceId seq, const Tensor3& k, const Tensor3& v);

  /// A new sequence that shares every block of `parent` (reference counts + 1): the same tokens,
  /// nothing copied. Returns the child's id.
  SequenceId fork(SequenceId parent);

  /// Ends sequence `seq`: each of its blocks loses one reference, and a block whose count reaches
  /// 0 returns to the free list.
  void free(SequenceId seq);

  /// Whether `seq` is a live sequence of this cache.
  bool has_sequence(SequenceId seq) const { return sequences_.count(seq) != 0; }
  /// The live sequences, in increasing order of id.
  std::vector<SequenceId> sequences() const;
  /// The number of tokens stored for `seq`.
  std::size_t length(SequenceId seq) const;
  /// The block table of `seq`: entry \f$ l \f$ is the physical block of logical block \f$ l \f$;
  /// \f$ \lceil \text{length} / b \rceil \f$ entries.
  const std::vector<std::size_t>& block_table(SequenceId seq) const;

  /// The number of block tables that point at physical block `block` (0 when it is free).
  std::size_t ref_count(std::size_t block) const;
  /// The free blocks, the one handed out next at the back: a stack, so that a block just freed is
  /// reused first, as the free list of vLLM's v0 `BlockAllocator` (`vllm/core/block_manager.py`) is.
  /// (vLLM v1 takes free blocks from a FIFO queue instead, so that a freed block that still holds a
  /// cached prefix stays reusable as long as possible.) At first blocks go out as 0, 1, 2, ...
  const std::vector<std::size_t>& free_list() const { return free_list_; }
  std::size_t free_blocks() const { return free_list_.size(); }
  /// Blocks that some table points at: \f$ \text{num\_blocks} - \text{free} \f$. With forks it is less than
  /// \f$ \sum_s \lceil L_s / b \rceil \f$, the blocks the sequences would take without sharing.
  std::size_t blocks_in_use() const { return cfg_.num_blocks - free_list_.size(); }
  /// Blocks copied by copy-on-write so far.
  std::size_t copy_on_write_count() const { return copies_; }

  const PagedKvConfig& config() const { return cfg_; }
  std::size_t num_blocks() const { return cfg_.num_blocks; }
  std::size_t block_size() const { return cfg_.block_size; }
  std::size_t num_kv_heads() const { return cfg_.num_kv_heads; }
  std::size_t head_dim() const { return cfg_.head_dim; }

  /// The format of the pool's elements.
  PagedKvStorage storage() const { return cfg_.storage; }
  /// The bytes one token's keys and values take in the pool (`paged_kv_bytes_per_token`).
  std::size_t bytes_per_token() const { return paged_kv_bytes_per_token(cfg_.storage, cfg_.num_kv_heads, cfg_.head_dim); }

  /// The float key pool `[num_blocks, num_kv_heads, block_size, head_dim]`; fp32 storage only (a
  /// cache in another storage throws `tvlab::Error` naming it: read `key_bits` or `key_codes`).
  const Tensor4& key_blocks() const;
  /// The float value pool, as `key_blocks`.
  const Tensor4& value_blocks() const;
  /// The bf16 bits of the key pool, row-major `[num_blocks, num_kv_heads, block_size, head_dim]`;
  /// bf16 storage only (`tvlab::Error` naming the storage otherwise).
  std::span<const std::uint16_t> key_bits() const;
  /// The bf16 bits of the value pool, as `key_bits`.
  std::span<const std::uint16_t> value_bits() const;
  /// The INT8 (two's complement) or E4M3 codes of the key pool, row-major
  /// `[num_blocks, num_kv_heads, block_size, head_dim]`; int8 and fp8_e4m3 storage only.
  std::span<const std::uint8_t> key_codes() const;
  /// The codes of the value pool, as `key_codes`.
  std::span<const std::uint8_t> value_codes() const;
  /// The scales of the key pool, one per slot, row-major `[num_blocks, num_kv_heads, block_size]`;
  /// int8 and fp8_e4m3 storage only.
  std::span<const float> key_scales() const;
  /// The scales of the value pool, as `key_scales`.
  std::span<const float> value_scales() const;

  /// Element `c` of the key of kv head `kv_head` in slot `slot` of physical block `block`, as the
  /// pool holds it, in double: the float itself, the bf16 value, \f$ s\,q \f$ (INT8) or
  /// \f$ s\,\mathrm{e4m3}(q) \f$ (E4M3), exactly. Indices are not checked (a kernel's inner loop).
  double key_at(std::size_t block, std::size_t kv_head, std::size_t slot, std::size_t c) const {
    return element(keys_, block, kv_head, slot, c);
  }
  /// Element `c` of a value, as `key_at`.
  double value_at(std::size_t block, std::size_t kv_head, std::size_t slot, std::size_t c) const {
    return element(values_, block, kv_head, slot, c);
  }

  /// The keys of `seq` gathered into a contiguous `[num_kv_heads, length, head_dim]` tensor
  /// (what a cache without pages would hold), dequantized (`key_at` rounded to float: exact for
  /// fp32 and bf16, \f$ s\,q \f$ rounded once for INT8 and E4M3).
  Tensor3 gather_keys(SequenceId seq) const;
  /// The values of `seq`, as `gather_keys`.
  Tensor3 gather_values(SequenceId seq) const;

  /// Checks, for `function`, that `block_table` can serve `context_len` tokens of this cache: at
  /// least \f$ \lceil \text{context\_len} / b \rceil \f$ entries (at least 1 token), each a block
  /// below `num_blocks` that is in use (reference count > 0). Throws `tvlab::Error` naming
  /// `parameter` (the table) or `context_len`. What a paged attention kernel relies on.
  void validate_block_table(const char* function, const char* parameter, std::span<const std::size_t> block_table,
                            std::size_t context_len) const;

 private:
  struct Sequence {
    std::vector<std::size_t> block_table;
    std::size_t length = 0;
  };

  // The keys (or the values) in the cache's storage: only the members of that storage are
  // allocated. Element (block, h, slot, c) is at ((block g + h) b + slot) d + c, a scale at
  // (block g + h) b + slot.
  struct Pool {
    Tensor4 floats;                    // fp32
    std::vector<std::uint16_t> bits;   // bf16
    std::vector<std::uint8_t> codes;   // int8, fp8_e4m3
    std::vector<float> scales;         // int8, fp8_e4m3
  };

  // The tokens of one append in the cache's storage, [num_kv_heads, n, head_dim]: the floats, and
  // for INT8 and FP8 their codes and per-token scales (kv_quant.hpp's quantize_kv, one group per
  // token and head).
  struct Encoded;

  double element(const Pool& pool, std::size_t block, std::size_t h, std::size_t slot, std::size_t c) const;
  void require_storage(const char* function, bool allowed, const char* expected) const;

  const Sequence& sequence(const char* function, SequenceId seq) const;
  // The free blocks an append of n tokens to s needs: new blocks past the last one, plus one for
  // the copy of a shared, partly filled last block.
  std::size_t blocks_needed(const Sequence& s, std::size_t n) const;
  void require_blocks(const char* function, SequenceId seq, const Sequence& s, std::size_t n) const;
  std::size_t take_free_block();
  // Checks k and v [num_kv_heads, n, head_dim] (named k_name, v_name) for the storage and appends
  // their n tokens to seq, all or none.
  void append_tokens(const char* function, SequenceId seq, const Tensor3& k, const Tensor3& v, const char* k_name,
                     const char* v_name);
  // Stores token t of the encoded keys and values in the next slot of s, taking a block or copying
  // a shared one first; the capacity was checked before.
  void store_token(Sequence& s, const Encoded& k, const Encoded& v, std::size_t t);
  void write_slot(Pool& pool, std::size_t block, std::size_t slot, const Encoded& x, std::size_t t);
  void copy_block(Pool& pool, std::size_t from, std::size_t to);
  Tensor3 gather(const Pool& pool, const Sequence& s) const;

  PagedKvConfig cfg_;
  Pool keys_, values_;
  std::vector<std::size_t> ref_counts_;
  std::vector<std::size_t> free_list_;
  std::map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 0;
  std::size_t copies_ = 0;
};

}  // namespace tvlab

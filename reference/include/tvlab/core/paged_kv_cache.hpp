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
/// @ingroup ch05

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// The sizes of a paged KV cache (the names of vLLM's `CacheConfig` and of Hugging Face configs).
struct PagedKvConfig {
  std::size_t num_blocks = 0;    ///< physical blocks in the pool
  std::size_t block_size = 16;   ///< \f$ b \f$: token slots per block (vLLM's default is 16)
  std::size_t num_kv_heads = 0;  ///< \f$ g \f$: key/value heads stored per token
  std::size_t head_dim = 0;      ///< \f$ d_k \f$: elements of one head's key (and value)
};

/// Checks `cfg` for `function`: every size at least 1. Throws `tvlab::Error` naming the field
/// (`cfg.block_size`, ...).
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
/// shows it in its output.
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

  /// Appends one token's key `k_t` and value `v_t`, both `[num_kv_heads, head_dim]`, to sequence
  /// `seq`. When the last block is full (or there is none) a free block is taken; when the last
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

  /// The key pool `[num_blocks, num_kv_heads, block_size, head_dim]`.
  const Tensor4& key_blocks() const { return keys_; }
  /// The value pool `[num_blocks, num_kv_heads, block_size, head_dim]`.
  const Tensor4& value_blocks() const { return values_; }

  /// The keys of `seq` gathered into a contiguous `[num_kv_heads, length, head_dim]` tensor
  /// (what a cache without pages would hold).
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

  const Sequence& sequence(const char* function, SequenceId seq) const;
  // The free blocks an append of n tokens to s needs: new blocks past the last one, plus one for
  // the copy of a shared, partly filled last block.
  std::size_t blocks_needed(const Sequence& s, std::size_t n) const;
  void require_blocks(const char* function, SequenceId seq, const Sequence& s, std::size_t n) const;
  std::size_t take_free_block();
  // Stores one token whose key of head h is k[h * head_stride + c] (and value v[...]) in the next
  // slot of s, taking a block or copying a shared one first; the capacity was checked before.
  void store_token(Sequence& s, const float* k, const float* v, std::size_t head_stride);

  PagedKvConfig cfg_;
  Tensor4 keys_, values_;
  std::vector<std::size_t> ref_counts_;
  std::vector<std::size_t> free_list_;
  std::map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 0;
  std::size_t copies_ = 0;
};

}  // namespace tvlab

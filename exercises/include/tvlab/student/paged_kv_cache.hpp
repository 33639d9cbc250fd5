#pragma once
/// @file
/// Exercise 05.2: the paged KV cache's append, with the block-table lookup and copy-on-write
/// (Kwon et al. 2023, section 4.4). The exercise works on the state of `tvlab::PagedKvCache` laid
/// open in two structs, with the pool's creation, `fork` and `free` given here; its tests drive the
/// student's structs and a real `PagedKvCache` through the same operations and compare every block
/// table, reference count, free list and stored number.

#include <cstddef>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch05
/// The pool of a paged KV cache, as `tvlab::PagedKvCache` keeps it: token \f$ t \f$ of a sequence
/// with block table \f$ T \f$ lives in block \f$ T[\lfloor t/b \rfloor] \f$, slot \f$ t \bmod b \f$.
struct PagedPool {
  PagedKvConfig cfg;                    ///< num_blocks, block_size \f$ b \f$, num_kv_heads, head_dim
  Tensor4 keys;                         ///< `[num_blocks, num_kv_heads, block_size, head_dim]`, NaN where never written
  Tensor4 values;                       ///< as `keys`
  std::vector<std::size_t> ref_counts;  ///< per block: the number of block tables that point at it
  std::vector<std::size_t> free_list;   ///< the free blocks, a stack: `back()` is handed out next
  std::size_t copies = 0;               ///< blocks copied by copy-on-write so far
};

/// @ingroup ch05
/// One sequence of a `PagedPool`: its block table (entry \f$ l \f$ is the physical block of logical
/// block \f$ l \f$) and its number of tokens.
struct PagedSequence {
  std::vector<std::size_t> block_table;
  std::size_t length = 0;
};

/// @ingroup ch05
/// Where a token lives: physical block and slot in it.
struct TokenSlot {
  std::size_t block = 0;
  std::size_t slot = 0;
};

/// @ingroup ch05
/// An empty pool, as `PagedKvCache`'s constructor makes it: every slot NaN, every count 0, and the
/// free stack holding num_blocks - 1 ... 0, so that blocks are handed out 0, 1, 2, ... at first.
inline PagedPool make_paged_pool(const PagedKvConfig& cfg) {
  validate_paged_kv_config("make_paged_pool", cfg);
  PagedPool pool{cfg, Tensor4::from_shape({cfg.num_blocks, cfg.num_kv_heads, cfg.block_size, cfg.head_dim}), {},
                 std::vector<std::size_t>(cfg.num_blocks, 0), {}, 0};
  pool.keys.fill(std::numeric_limits<float>::quiet_NaN());
  pool.values = pool.keys;
  for (std::size_t b = cfg.num_blocks; b-- > 0;) pool.free_list.push_back(b);
  return pool;
}

/// @ingroup ch05
/// `PagedKvCache::fork`: a new sequence that shares every block of `parent` (each count + 1),
/// nothing copied.
inline PagedSequence paged_fork(PagedPool& pool, const PagedSequence& parent) {
  for (const std::size_t block : parent.block_table) {
    require(block < pool.ref_counts.size() && pool.ref_counts[block] > 0, "paged_fork", "parent's block ", block,
            " is not a block in use of this pool");
  }
  for (const std::size_t block : parent.block_table) ++pool.ref_counts[block];
  return parent;
}

/// @ingroup ch05
/// `PagedKvCache::free`: each block of `seq` loses one reference, and a block whose count reaches 0
/// goes back on the free stack (in reverse table order, so that the first block ends on top).
/// `seq` is left empty.
inline void paged_free(PagedPool& pool, PagedSequence& seq) {
  for (const std::size_t block : seq.block_table) {
    require(block < pool.ref_counts.size() && pool.ref_counts[block] > 0, "paged_free", "seq's block ", block,
            " is not a block in use of this pool");
  }
  for (auto block = seq.block_table.rbegin(); block != seq.block_table.rend(); ++block)
    if (--pool.ref_counts[*block] == 0) pool.free_list.push_back(*block);
  seq = PagedSequence{};
}

/// @ingroup ch05
/// `PagedKvCache::append` of one token: stores the key `k_t` and value `v_t`, both
/// `[num_kv_heads, head_dim]`, as token \f$ t \f$ = `seq.length` of `seq`, in block
/// \f$ T[\lfloor t/b \rfloor] \f$, slot \f$ t \bmod b \f$, and returns that place. When \f$ t \bmod b = 0 \f$
/// the sequence takes the free block on top of the stack (count 1); when its last block is shared
/// (count > 1) it first copies that block into a free one, points its table at the copy and leaves
/// the original one reference fewer (copy-on-write). Throws `tvlab::Error` naming `k_t` or `v_t`
/// (shape, a value that is not finite), naming `seq` (a table that is not
/// \f$ \lceil \text{length}/b \rceil \f$ blocks in use of `pool`), or saying that no free block is
/// left; the pool and `seq` are then unchanged.
TokenSlot paged_append(PagedPool& pool, PagedSequence& seq, const Tensor2& k_t, const Tensor2& v_t);

}  // namespace tvlab::student

#include "tvlab/core/paged_kv_cache.hpp"

#include <limits>
#include <string>

#include "tvlab/core/error.hpp"

namespace tvlab {

void validate_paged_kv_config(const char* function, const PagedKvConfig& cfg) {
  require_positive(function, "cfg.num_blocks", cfg.num_blocks);
  require_positive(function, "cfg.block_size", cfg.block_size);
  require_positive(function, "cfg.num_kv_heads", cfg.num_kv_heads);
  require_positive(function, "cfg.head_dim", cfg.head_dim);
}

PagedKvCache::PagedKvCache(const PagedKvConfig& cfg) : cfg_(cfg) {
  const char* fn = "PagedKvCache";
  validate_paged_kv_config(fn, cfg);
  checked_element_count(fn, {cfg.num_blocks, cfg.num_kv_heads, cfg.block_size, cfg.head_dim});
  // Slots never written hold NaN: reading one poisons the output instead of passing unnoticed.
  const float unwritten = std::numeric_limits<float>::quiet_NaN();
  keys_ = Tensor4::from_shape({cfg.num_blocks, cfg.num_kv_heads, cfg.block_size, cfg.head_dim});
  keys_.fill(unwritten);
  values_ = keys_;
  ref_counts_.assign(cfg.num_blocks, 0);
  // A stack whose top (the back) is block 0: blocks are handed out 0, 1, 2, ... at first.
  free_list_.reserve(cfg.num_blocks);
  for (std::size_t b = cfg.num_blocks; b-- > 0;) free_list_.push_back(b);
}

SequenceId PagedKvCache::add_sequence() {
  sequences_.emplace(next_id_, Sequence{});
  return next_id_++;
}

const PagedKvCache::Sequence& PagedKvCache::sequence(const char* function, SequenceId seq) const {
  const auto found = sequences_.find(seq);
  if (found == sequences_.end()) {
    fail(function, "seq (", seq, ") is not a live sequence of this cache (", sequences_.size(),
         " live; a sequence that was freed is gone)");
  }
  return found->second;
}

std::vector<SequenceId> PagedKvCache::sequences() const {
  std::vector<SequenceId> ids;
  for (const auto& [id, s] : sequences_) ids.push_back(id);
  return ids;
}

std::size_t PagedKvCache::length(SequenceId seq) const { return sequence("PagedKvCache::length", seq).length; }

const std::vector<std::size_t>& PagedKvCache::block_table(SequenceId seq) const {
  return sequence("PagedKvCache::block_table", seq).block_table;
}

std::size_t PagedKvCache::ref_count(std::size_t block) const {
  require(block < cfg_.num_blocks, "PagedKvCache::ref_count", "block (", block, ") is out of range: the pool has ",
          cfg_.num_blocks, " blocks");
  return ref_counts_[block];
}

std::size_t PagedKvCache::blocks_needed(const Sequence& s, std::size_t n) const {
  const std::size_t b = cfg_.block_size;
  // New blocks: ceil((L + n) / b) - ceil(L / b).
  std::size_t needed = (s.length + n + b - 1) / b - (s.length + b - 1) / b;
  // A partly filled last block that another table shares is copied before the first write.
  const bool last_block_partial = s.length % b != 0;
  if (n > 0 && last_block_partial && ref_counts_[s.block_table.back()] > 1) ++needed;
  return needed;
}

void PagedKvCache::require_blocks(const char* function, SequenceId seq, const Sequence& s, std::size_t n) const {
  const std::size_t needed = blocks_needed(s, n);
  if (needed > free_list_.size()) {
    fail(function, "no free block for seq (", seq, "): appending ", n, " token(s) to its ", s.length,
         " needs ", needed, " free block(s), ", free_list_.size(), " of the pool's num_blocks (", cfg_.num_blocks,
         ") are free; free a sequence or make the pool larger");
  }
}

std::size_t PagedKvCache::take_free_block() {
  const std::size_t block = free_list_.back();
  free_list_.pop_back();
  ref_counts_[block] = 1;
  return block;
}

void PagedKvCache::store_token(Sequence& s, const float* k, const float* v, std::size_t head_stride) {
  const std::size_t b = cfg_.block_size, slot = s.length % b;
  if (slot == 0) {
    s.block_table.push_back(take_free_block());
  } else if (ref_counts_[s.block_table.back()] > 1) {
    // Copy-on-write: this table gets its own copy of the shared block; the others keep the original.
    const std::size_t shared = s.block_table.back(), copy = take_free_block();
    xt::view(keys_, copy) = xt::view(keys_, shared);
    xt::view(values_, copy) = xt::view(values_, shared);
    --ref_counts_[shared];
    s.block_table.back() = copy;
    ++copies_;
  }
  const std::size_t block = s.block_table.back();
  for (std::size_t h = 0; h < cfg_.num_kv_heads; ++h)
    for (std::size_t c = 0; c < cfg_.head_dim; ++c) {
      keys_(block, h, slot, c) = k[h * head_stride + c];
      values_(block, h, slot, c) = v[h * head_stride + c];
    }
  ++s.length;
}

void PagedKvCache::append(SequenceId seq, const Tensor2& k_t, const Tensor2& v_t) {
  const char* fn = "PagedKvCache::append";
  const Sequence& s = sequence(fn, seq);
  for (const auto& [name, x] : {std::pair<const char*, const Tensor2*>{"k_t", &k_t}, {"v_t", &v_t}}) {
    require(x->shape()[0] == cfg_.num_kv_heads && x->shape()[1] == cfg_.head_dim, fn, name, " has shape ",
            shape_string_of(*x), ", expected [num_kv_heads, head_dim] = [", cfg_.num_kv_heads, ", ", cfg_.head_dim,
            "]");
    require_finite(fn, name, *x);
  }
  require_blocks(fn, seq, s, 1);
  store_token(sequences_.at(seq), k_t.data(), v_t.data(), cfg_.head_dim);
}

void PagedKvCache::append(SequenceId seq, const Tensor3& k, const Tensor3& v) {
  const char* fn = "PagedKvCache::append";
  const Sequence& s = sequence(fn, seq);
  for (const auto& [name, x] : {std::pair<const char*, const Tensor3*>{"k", &k}, {"v", &v}}) {
    require(x->shape()[0] == cfg_.num_kv_heads && x->shape()[2] == cfg_.head_dim, fn, name, " has shape ",
            shape_string_of(*x), ", expected [num_kv_heads, n, head_dim] with num_kv_heads = ", cfg_.num_kv_heads,
            ", head_dim = ", cfg_.head_dim);
    require_finite(fn, name, *x);
  }
  require(k.shape()[1] == v.shape()[1], fn, "v has ", v.shape()[1], " tokens, expected ", k.shape()[1],
          " (the tokens of k)");
  const std::size_t n = k.shape()[1];
  require_blocks(fn, seq, s, n);
  Sequence& target = sequences_.at(seq);
  // Token t of head h is at (h n + t) head_dim: pointer to token t, heads n head_dim apart.
  for (std::size_t t = 0; t < n; ++t)
    store_token(target, k.data() + t * cfg_.head_dim, v.data() + t * cfg_.head_dim, n * cfg_.head_dim);
}

SequenceId PagedKvCache::fork(SequenceId parent) {
  const Sequence& s = sequence("PagedKvCache::fork", parent);
  // The child shares every block of the parent: one more table points at each.
  sequences_.emplace(next_id_, Sequence{s});
  for (const std::size_t block : s.block_table) ++ref_counts_[block];
  return next_id_++;
}

void PagedKvCache::free(SequenceId seq) {
  const Sequence& s = sequence("PagedKvCache::free", seq);
  // Freed in reverse, so that the sequence's first block ends on top of the stack.
  for (auto block = s.block_table.rbegin(); block != s.block_table.rend(); ++block)
    if (--ref_counts_[*block] == 0) free_list_.push_back(*block);
  sequences_.erase(seq);
}

namespace {

// x[h, t, c] = pool[T[t / b], h, t mod b, c]: the tokens of one table, contiguous.
Tensor3 gather(const Tensor4& pool, const std::vector<std::size_t>& table, std::size_t length, std::size_t block_size) {
  const std::size_t heads = pool.shape()[1], head_dim = pool.shape()[3];
  Tensor3 out = Tensor3::from_shape({heads, length, head_dim});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < length; ++t)
      for (std::size_t c = 0; c < head_dim; ++c) out(h, t, c) = pool(table[t / block_size], h, t % block_size, c);
  return out;
}

}  // namespace

Tensor3 PagedKvCache::gather_keys(SequenceId seq) const {
  const Sequence& s = sequence("PagedKvCache::gather_keys", seq);
  return gather(keys_, s.block_table, s.length, cfg_.block_size);
}

Tensor3 PagedKvCache::gather_values(SequenceId seq) const {
  const Sequence& s = sequence("PagedKvCache::gather_values", seq);
  return gather(values_, s.block_table, s.length, cfg_.block_size);
}

void PagedKvCache::validate_block_table(const char* function, const char* parameter,
                                        std::span<const std::size_t> block_table, std::size_t context_len) const {
  require_positive(function, "context_len", context_len);
  const std::size_t needed = (context_len + cfg_.block_size - 1) / cfg_.block_size;
  require(block_table.size() >= needed, function, parameter, " has ", block_table.size(), " entries, context_len (",
          context_len, ") needs ceil(context_len / block_size) = ", needed);
  for (std::size_t l = 0; l < needed; ++l) {
    const std::size_t block = block_table[l];
    require(block < cfg_.num_blocks, function, parameter, "[", l, "] = ", block,
            " is out of range: the pool has num_blocks = ", cfg_.num_blocks);
    require(ref_counts_[block] > 0, function, parameter, "[", l, "] = ", block,
            " is a free block (reference count 0): its contents belong to no sequence");
  }
}

}  // namespace tvlab

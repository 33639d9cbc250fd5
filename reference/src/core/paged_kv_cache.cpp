#include "tvlab/core/paged_kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "tvlab/core/dtype.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/kv_quant.hpp"

namespace tvlab {

const char* storage_name(PagedKvStorage storage) {
  switch (storage) {
    case PagedKvStorage::fp32: return "fp32";
    case PagedKvStorage::bf16: return "bf16";
    case PagedKvStorage::int8: return "int8";
    case PagedKvStorage::fp8_e4m3: return "fp8_e4m3";
  }
  return "unknown";
}

namespace {

bool is_quantized(PagedKvStorage storage) {
  return storage == PagedKvStorage::int8 || storage == PagedKvStorage::fp8_e4m3;
}

void require_known_storage(const char* function, const char* name, PagedKvStorage storage) {
  const auto value = static_cast<int>(storage);
  require(value >= static_cast<int>(PagedKvStorage::fp32) && value <= static_cast<int>(PagedKvStorage::fp8_e4m3),
          function, name, " (", value, ") is not a PagedKvStorage: fp32, bf16, int8 or fp8_e4m3");
}

// Asks the operating system to back the 2 MiB-aligned part of [data, data + bytes) with 2 MiB
// pages (transparent huge pages), before the memory is first written. A pool is one allocation
// that the decode step reads in runs of one page of positions (8 KiB at b = 16, d = 128) anywhere
// in it: with 4 KiB pages nearly every run needs a translation the TLB does not hold, and the page
// walk is a cache miss of its own, which the contiguous cache's sequential reads do not pay. With 2
// MiB pages a 256 MiB pool needs 128 translations. Only advice: where the system has no huge pages
// to give (or another OS), the pool works as before.
void advise_huge_pages(const void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const std::uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// `count` elements of `value`: allocated (untouched), advised to use huge pages, then written.
template <class T>
void fill_advised(std::vector<T>& pool, std::size_t count, T value) {
  pool.reserve(count);
  advise_huge_pages(pool.data(), count * sizeof(T));
  pool.assign(count, value);
}

}  // namespace

std::size_t paged_kv_bytes_per_token(PagedKvStorage storage, std::size_t num_kv_heads, std::size_t head_dim) {
  require_known_storage("paged_kv_bytes_per_token", "storage", storage);
  const std::size_t elements = 2 * num_kv_heads * head_dim;  // keys and values
  switch (storage) {
    case PagedKvStorage::fp32: return elements * sizeof(float);
    case PagedKvStorage::bf16: return elements * sizeof(std::uint16_t);
    default: return elements + 2 * num_kv_heads * sizeof(float);  // a byte per element, a scale per head
  }
}

void validate_paged_kv_config(const char* function, const PagedKvConfig& cfg) {
  require_positive(function, "cfg.num_blocks", cfg.num_blocks);
  require_positive(function, "cfg.block_size", cfg.block_size);
  require_positive(function, "cfg.num_kv_heads", cfg.num_kv_heads);
  require_positive(function, "cfg.head_dim", cfg.head_dim);
  require_known_storage(function, "cfg.storage", cfg.storage);
}

PagedKvCache::PagedKvCache(const PagedKvConfig& cfg) : cfg_(cfg) {
  const char* fn = "PagedKvCache";
  validate_paged_kv_config(fn, cfg);
  const std::size_t elements =
      checked_element_count(fn, {cfg.num_blocks, cfg.num_kv_heads, cfg.block_size, cfg.head_dim});
  const std::size_t slots = cfg.num_blocks * cfg.num_kv_heads * cfg.block_size;
  // Slots never written hold NaN: reading one poisons the output instead of passing unnoticed.
  const float unwritten = std::numeric_limits<float>::quiet_NaN();
  // The keys' and the values' pools, each allocated, advised to use huge pages, then filled.
  for (Pool* pool : {&keys_, &values_}) switch (cfg.storage) {
      case PagedKvStorage::fp32:
        pool->floats = Tensor4::from_shape({cfg.num_blocks, cfg.num_kv_heads, cfg.block_size, cfg.head_dim});
        advise_huge_pages(pool->floats.data(), elements * sizeof(float));
        pool->floats.fill(unwritten);
        break;
      case PagedKvStorage::bf16:
        fill_advised(pool->bits, elements, float_to_bf16_bits(unwritten));
        break;
      case PagedKvStorage::int8:
        fill_advised(pool->codes, elements, std::uint8_t{0});
        fill_advised(pool->scales, slots, unwritten);
        break;
      case PagedKvStorage::fp8_e4m3:
        fill_advised(pool->codes, elements, std::uint8_t{0x7f});  // E4M3's NaN, and a NaN scale
        fill_advised(pool->scales, slots, unwritten);
        break;
    }
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

void PagedKvCache::require_storage(const char* function, bool allowed, const char* expected) const {
  require(allowed, function, "the cache stores ", storage_name(cfg_.storage), ", not ", expected,
          " (PagedKvConfig::storage): read the pool of its own storage, or gather_keys / gather_values");
}

const Tensor4& PagedKvCache::key_blocks() const {
  require_storage("PagedKvCache::key_blocks", cfg_.storage == PagedKvStorage::fp32, "fp32");
  return keys_.floats;
}
const Tensor4& PagedKvCache::value_blocks() const {
  require_storage("PagedKvCache::value_blocks", cfg_.storage == PagedKvStorage::fp32, "fp32");
  return values_.floats;
}
std::span<const std::uint16_t> PagedKvCache::key_bits() const {
  require_storage("PagedKvCache::key_bits", cfg_.storage == PagedKvStorage::bf16, "bf16");
  return keys_.bits;
}
std::span<const std::uint16_t> PagedKvCache::value_bits() const {
  require_storage("PagedKvCache::value_bits", cfg_.storage == PagedKvStorage::bf16, "bf16");
  return values_.bits;
}
std::span<const std::uint8_t> PagedKvCache::key_codes() const {
  require_storage("PagedKvCache::key_codes", is_quantized(cfg_.storage), "int8 or fp8_e4m3");
  return keys_.codes;
}
std::span<const std::uint8_t> PagedKvCache::value_codes() const {
  require_storage("PagedKvCache::value_codes", is_quantized(cfg_.storage), "int8 or fp8_e4m3");
  return values_.codes;
}
std::span<const float> PagedKvCache::key_scales() const {
  require_storage("PagedKvCache::key_scales", is_quantized(cfg_.storage), "int8 or fp8_e4m3");
  return keys_.scales;
}
std::span<const float> PagedKvCache::value_scales() const {
  require_storage("PagedKvCache::value_scales", is_quantized(cfg_.storage), "int8 or fp8_e4m3");
  return values_.scales;
}

double PagedKvCache::element(const Pool& pool, std::size_t block, std::size_t h, std::size_t slot,
                             std::size_t c) const {
  const std::size_t row = (block * cfg_.num_kv_heads + h) * cfg_.block_size + slot, e = row * cfg_.head_dim + c;
  switch (cfg_.storage) {
    case PagedKvStorage::fp32: return pool.floats.data()[e];
    case PagedKvStorage::bf16: return bf16_bits_to_float(pool.bits[e]);
    // x^ = s q, exact in double (a float times a code of at most 8 significant bits)
    case PagedKvStorage::int8: return double{pool.scales[row]} * static_cast<std::int8_t>(pool.codes[e]);
    case PagedKvStorage::fp8_e4m3: return double{pool.scales[row]} * e4m3_bits_to_float(pool.codes[e]);
  }
  return std::numeric_limits<double>::quiet_NaN();
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

struct PagedKvCache::Encoded {
  const Tensor3& floats;  // [num_kv_heads, n, head_dim]
  QuantizedKv quantized;  // int8, fp8_e4m3: codes [g, n, d] and scales [g, n]
};

void PagedKvCache::copy_block(Pool& pool, std::size_t from, std::size_t to) {
  const std::size_t elements = cfg_.num_kv_heads * cfg_.block_size * cfg_.head_dim;
  const std::size_t slots = cfg_.num_kv_heads * cfg_.block_size;
  switch (cfg_.storage) {
    case PagedKvStorage::fp32: xt::view(pool.floats, to) = xt::view(pool.floats, from); break;
    case PagedKvStorage::bf16: std::copy_n(pool.bits.begin() + from * elements, elements, pool.bits.begin() + to * elements); break;
    case PagedKvStorage::int8:
    case PagedKvStorage::fp8_e4m3:
      // codes and scales alike: a copy that kept the codes with other scales would be other numbers
      std::copy_n(pool.codes.begin() + from * elements, elements, pool.codes.begin() + to * elements);
      std::copy_n(pool.scales.begin() + from * slots, slots, pool.scales.begin() + to * slots);
      break;
  }
}

void PagedKvCache::write_slot(Pool& pool, std::size_t block, std::size_t slot, const Encoded& x, std::size_t t) {
  const std::size_t n = x.floats.shape()[1], d = cfg_.head_dim;
  for (std::size_t h = 0; h < cfg_.num_kv_heads; ++h) {
    const std::size_t row = (block * cfg_.num_kv_heads + h) * cfg_.block_size + slot;
    for (std::size_t c = 0; c < d; ++c) {
      switch (cfg_.storage) {
        case PagedKvStorage::fp32: pool.floats(block, h, slot, c) = x.floats(h, t, c); break;
        case PagedKvStorage::bf16: pool.bits[row * d + c] = float_to_bf16_bits(x.floats(h, t, c)); break;
        default: pool.codes[row * d + c] = x.quantized.codes[(h * n + t) * d + c]; break;
      }
    }
    if (is_quantized(cfg_.storage)) pool.scales[row] = x.quantized.scales[h * n + t];  // group (h, t)
  }
}

void PagedKvCache::store_token(Sequence& s, const Encoded& k, const Encoded& v, std::size_t t) {
  const std::size_t b = cfg_.block_size, slot = s.length % b;
  if (slot == 0) {
    s.block_table.push_back(take_free_block());
  } else if (ref_counts_[s.block_table.back()] > 1) {
    // Copy-on-write: this table gets its own copy of the shared block; the others keep the original.
    const std::size_t shared = s.block_table.back(), copy = take_free_block();
    copy_block(keys_, shared, copy);
    copy_block(values_, shared, copy);
    --ref_counts_[shared];
    s.block_table.back() = copy;
    ++copies_;
  }
  const std::size_t block = s.block_table.back();
  write_slot(keys_, block, slot, k, t);
  write_slot(values_, block, slot, v, t);
  ++s.length;
}

void PagedKvCache::append_tokens(const char* function, SequenceId seq, const Tensor3& k, const Tensor3& v,
                                 const char* k_name, const char* v_name) {
  const Sequence& s = sequence(function, seq);
  for (const auto& [name, x] : {std::pair<const char*, const Tensor3*>{k_name, &k}, {v_name, &v}}) {
    require_finite(function, name, *x);
    if (cfg_.storage != PagedKvStorage::bf16) continue;
    // bf16 has float's exponent range, but the floats closest to its largest value round up to infinity.
    for (const float value : *x)
      require(std::isfinite(round_to_bf16(value)), function, name, " holds ", value,
              ", which rounds to infinity in bf16 (the cache's storage; its largest finite value is ",
              bf16_bits_to_float(0x7f7f), ")");
  }
  require_blocks(function, seq, s, k.shape()[1]);
  if (k.shape()[1] == 0) return;  // nothing to store
  // Quantized per token and kv head, as kv_quant.hpp's quantize_kv does with one group of head_dim
  // channels: the same codes and scales a contiguous cache of these tokens would hold.
  const auto encode = [&](const Tensor3& x) {
    Encoded e{x, {}};
    if (cfg_.storage == PagedKvStorage::int8) e.quantized = quantize_kv(x, int8_per_token(cfg_.head_dim));
    if (cfg_.storage == PagedKvStorage::fp8_e4m3) e.quantized = quantize_kv(x, fp8_e4m3_per_token(cfg_.head_dim));
    return e;
  };
  const Encoded k_encoded = encode(k), v_encoded = encode(v);
  // The largest code times its scale, s Q, is the largest value read back: within float's range
  // unless max|x| lies within a rounding of float's largest value.
  if (is_quantized(cfg_.storage)) {
    const double q_max = cfg_.storage == PagedKvStorage::int8 ? 127.0 : double{kE4m3Max};
    for (const auto& [name, x] : {std::pair<const char*, const Encoded*>{k_name, &k_encoded}, {v_name, &v_encoded}})
      for (const float scale : x->quantized.scales)
        require(std::isfinite(static_cast<float>(scale * q_max)), function, name, " holds a value of magnitude ",
                scale * q_max, ": its ", storage_name(cfg_.storage), " scale s = max|x| / ", q_max,
                " times the largest code overflows float when read back");
  }
  Sequence& target = sequences_.at(seq);
  for (std::size_t t = 0; t < k.shape()[1]; ++t) store_token(target, k_encoded, v_encoded, t);
}

void PagedKvCache::append(SequenceId seq, const Tensor2& k_t, const Tensor2& v_t) {
  const char* fn = "PagedKvCache::append";
  sequence(fn, seq);
  for (const auto& [name, x] : {std::pair<const char*, const Tensor2*>{"k_t", &k_t}, {"v_t", &v_t}}) {
    require(x->shape()[0] == cfg_.num_kv_heads && x->shape()[1] == cfg_.head_dim, fn, name, " has shape ",
            shape_string_of(*x), ", expected [num_kv_heads, head_dim] = [", cfg_.num_kv_heads, ", ", cfg_.head_dim,
            "]");
  }
  // One token: [num_kv_heads, 1, head_dim].
  const Tensor3 k = xt::view(k_t, xt::all(), xt::newaxis(), xt::all());
  const Tensor3 v = xt::view(v_t, xt::all(), xt::newaxis(), xt::all());
  append_tokens(fn, seq, k, v, "k_t", "v_t");
}

void PagedKvCache::append(SequenceId seq, const Tensor3& k, const Tensor3& v) {
  const char* fn = "PagedKvCache::append";
  sequence(fn, seq);
  for (const auto& [name, x] : {std::pair<const char*, const Tensor3*>{"k", &k}, {"v", &v}}) {
    require(x->shape()[0] == cfg_.num_kv_heads && x->shape()[2] == cfg_.head_dim, fn, name, " has shape ",
            shape_string_of(*x), ", expected [num_kv_heads, n, head_dim] with num_kv_heads = ", cfg_.num_kv_heads,
            ", head_dim = ", cfg_.head_dim);
  }
  require(k.shape()[1] == v.shape()[1], fn, "v has ", v.shape()[1], " tokens, expected ", k.shape()[1],
          " (the tokens of k)");
  append_tokens(fn, seq, k, v, "k", "v");
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

Tensor3 PagedKvCache::gather_keys(SequenceId seq) const {
  const Sequence& s = sequence("PagedKvCache::gather_keys", seq);
  return gather(keys_, s);
}

Tensor3 PagedKvCache::gather_values(SequenceId seq) const {
  const Sequence& s = sequence("PagedKvCache::gather_values", seq);
  return gather(values_, s);
}

// x[h, t, c] = pool[T[t / b], h, t mod b, c]: the tokens of one table, contiguous and dequantized.
Tensor3 PagedKvCache::gather(const Pool& pool, const Sequence& s) const {
  const std::size_t b = cfg_.block_size;
  Tensor3 out = Tensor3::from_shape({cfg_.num_kv_heads, s.length, cfg_.head_dim});
  for (std::size_t h = 0; h < cfg_.num_kv_heads; ++h)
    for (std::size_t t = 0; t < s.length; ++t)
      for (std::size_t c = 0; c < cfg_.head_dim; ++c)
        out(h, t, c) = static_cast<float>(element(pool, s.block_table[t / b], h, t % b, c));
  return out;
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

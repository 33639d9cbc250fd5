// Chapter 05 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/gqa_decode.hpp"
#include "tvlab/student/mla_decode.hpp"
#include "tvlab/student/paged_kv_cache.hpp"

namespace tvlab::student {

GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale) {
  // BEGIN EXERCISE 05.1 "one GQA decode step: query head i reads kv head floor(i / (h/g))" "MHA → MQA → GQA: sharing key/value heads"
  const char* fn = "gqa_decode_attention";
  // The head mapping needs g >= 1 kv heads, each serving the same number h/g of query heads.
  const std::size_t heads = q.shape()[0], kv_heads = k_cache.shape()[0];
  require(kv_heads > 0, fn, "k_cache has no kv head (num_kv_heads = 0): each query head must read one");
  require(heads % kv_heads == 0, fn, "num_heads (", heads, ", rows of q) must be a multiple of num_kv_heads (",
          kv_heads, ", first axis of k_cache)");
  const ref::GqaDecodeDims dims = ref::validate_gqa_decode(fn, q, k_cache, v_cache, length, scale);
  const std::size_t group = heads / kv_heads, d = dims.d, d_v = dims.d_v;
  GqaDecodeOutput result{Tensor2::from_shape({heads, d_v}), Tensor1::from_shape({heads})};
  std::vector<double> s(length), o(d_v);
  for (std::size_t i = 0; i < heads; ++i) {
    const std::size_t kv = i / group;  // kappa(i) = floor(i / (h/g)): groups of h/g consecutive heads
    // s_j = scale q_i . k_j for j < length (the free slots after them are never read); m = max_j s_j
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < length; ++j) {
      double dot = 0.0;
      for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(q(i, e)) * k_cache(kv, j, e);
      s[j] = dims.scale * dot;
      m = std::max(m, s[j]);
    }
    // l = sum_j e^{s_j - m}, o = sum_j e^{s_j - m} v_j / l, L = m + ln l: every exponent <= 0
    double l = 0.0;
    std::fill(o.begin(), o.end(), 0.0);
    for (std::size_t j = 0; j < length; ++j) {
      const double p = std::exp(s[j] - m);
      l += p;
      for (std::size_t e = 0; e < d_v; ++e) o[e] += p * v_cache(kv, j, e);
    }
    for (std::size_t e = 0; e < d_v; ++e) result.out(i, e) = static_cast<float>(o[e] / l);
    result.lse(i) = static_cast<float>(m + std::log(l));
  }
  return result;
  // END EXERCISE
}

TokenSlot paged_append(PagedPool& pool, PagedSequence& seq, const Tensor2& k_t, const Tensor2& v_t) {
  // BEGIN EXERCISE 05.2 "the paged append: block-table lookup and copy-on-write" "The paged cache"
  const char* fn = "paged_append";
  const PagedKvConfig& cfg = pool.cfg;
  require_dim(fn, "k_t", k_t, 0, "rows", cfg.num_kv_heads, "num_kv_heads");
  require_dim(fn, "k_t", k_t, 1, "columns", cfg.head_dim, "head_dim");
  require_dim(fn, "v_t", v_t, 0, "rows", cfg.num_kv_heads, "num_kv_heads");
  require_dim(fn, "v_t", v_t, 1, "columns", cfg.head_dim, "head_dim");
  require_finite(fn, "k_t", k_t);
  require_finite(fn, "v_t", v_t);
  // Token t goes to logical block floor(t / b), slot t mod b.
  const std::size_t b = cfg.block_size, t = seq.length, slot = t % b;
  // A table of ceil(t / b) blocks in use of this pool, or the lookup below would read past it.
  require(seq.block_table.size() == (t + b - 1) / b, fn, "seq has ", seq.block_table.size(),
          " blocks in its table for length ", t, ", expected ceil(length / block_size) = ", (t + b - 1) / b);
  for (const std::size_t block : seq.block_table)
    require(block < cfg.num_blocks && pool.ref_counts[block] > 0, fn, "seq's block table holds block ", block,
            ", which is not a block in use of this pool (num_blocks = ", cfg.num_blocks, ")");
  const bool needs_new_block = slot == 0;  // the last block is full, or there is none
  const bool last_block_shared = !needs_new_block && pool.ref_counts[seq.block_table.back()] > 1;
  // Checked before anything changes, so that a refused append leaves the pool as it was.
  require(!(needs_new_block || last_block_shared) || !pool.free_list.empty(), fn, "no free block for token ", t,
          ": all num_blocks (", cfg.num_blocks, ") are in use; free a sequence or make the pool larger");
  const auto take_free_block = [&pool] {
    const std::size_t block = pool.free_list.back();
    pool.free_list.pop_back();
    pool.ref_counts[block] = 1;
    return block;
  };
  if (needs_new_block) {
    seq.block_table.push_back(take_free_block());
  } else if (last_block_shared) {
    // Copy-on-write: this sequence gets its own copy; the other tables keep the original.
    const std::size_t shared = seq.block_table.back(), copy = take_free_block();
    xt::view(pool.keys, copy) = xt::view(pool.keys, shared);
    xt::view(pool.values, copy) = xt::view(pool.values, shared);
    --pool.ref_counts[shared];
    seq.block_table.back() = copy;
    ++pool.copies;
  }
  const std::size_t block = seq.block_table[t / b];
  for (std::size_t h = 0; h < cfg.num_kv_heads; ++h)
    for (std::size_t c = 0; c < cfg.head_dim; ++c) {
      pool.keys(block, h, slot, c) = k_t(h, c);
      pool.values(block, h, slot, c) = v_t(h, c);
    }
  ++seq.length;
  return {block, slot};
  // END EXERCISE
}

Tensor2 mla_absorbed_scores(const Tensor2& q_nope, const Tensor2& q_rope, const Tensor2& w_uk, const Tensor2& latents,
                            const Tensor2& rope_keys, const MlaConfig& cfg) {
  // BEGIN EXERCISE 05.3 "the absorbed MLA scores" "The absorbed decode: one wide shared head"
  const char* fn = "mla_absorbed_scores";
  validate_mla_config(fn, cfg);
  const auto heads = static_cast<std::size_t>(cfg.num_heads), d_c = static_cast<std::size_t>(cfg.kv_lora_rank);
  const auto d_h = static_cast<std::size_t>(cfg.qk_nope_head_dim), d_r = static_cast<std::size_t>(cfg.qk_rope_head_dim);
  require_nonempty(fn, "latents", latents);
  const std::size_t n = latents.shape()[0];
  require_dim(fn, "q_nope", q_nope, 0, "rows", heads, "num_heads");
  require_dim(fn, "q_nope", q_nope, 1, "columns", d_h, "qk_nope_head_dim");
  require_dim(fn, "q_rope", q_rope, 0, "rows", heads, "num_heads");
  require_dim(fn, "q_rope", q_rope, 1, "columns", d_r, "qk_rope_head_dim");
  require_dim(fn, "w_uk", w_uk, 0, "rows", d_c, "kv_lora_rank");
  require_dim(fn, "w_uk", w_uk, 1, "columns", heads * d_h, "num_heads * qk_nope_head_dim");
  require_dim(fn, "latents", latents, 1, "columns", d_c, "kv_lora_rank");
  require_dim(fn, "rope_keys", rope_keys, 0, "rows", n, "one RoPE key per cached position, the rows of latents");
  require_dim(fn, "rope_keys", rope_keys, 1, "columns", d_r, "qk_rope_head_dim");
  require_finite(fn, "q_nope", q_nope);
  require_finite(fn, "q_rope", q_rope);
  require_finite(fn, "w_uk", w_uk);
  require_finite(fn, "latents", latents);
  require_finite(fn, "rope_keys", rope_keys);
  const double scale = mla_softmax_scale(cfg);  // 1/sqrt(d_h + d_h^R): the width of [q^C; q^R], not of q~
  Tensor2 scores = Tensor2::from_shape({heads, n});
  std::vector<double> q_tilde(d_c);
  for (std::size_t i = 0; i < heads; ++i) {
    // q~_i = W^UK_i^T q^C_i, with W^UK_i the columns [i d_h, (i+1) d_h) of w_uk: once per head, not per position
    for (std::size_t c = 0; c < d_c; ++c) {
      double sum = 0.0;
      for (std::size_t e = 0; e < d_h; ++e) sum += static_cast<double>(w_uk(c, i * d_h + e)) * q_nope(i, e);
      q_tilde[c] = sum;
    }
    // s_ij = (q~_i . c^KV_j + q^R_i . k^R_j) / sqrt(d_h + d_h^R)
    for (std::size_t j = 0; j < n; ++j) {
      double content = 0.0, position = 0.0;
      for (std::size_t c = 0; c < d_c; ++c) content += q_tilde[c] * latents(j, c);
      for (std::size_t e = 0; e < d_r; ++e) position += static_cast<double>(q_rope(i, e)) * rope_keys(j, e);
      scores(i, j) = static_cast<float>(scale * (content + position));
    }
  }
  return scores;
  // END EXERCISE
}

}  // namespace tvlab::student

// Chapter 05's exercises (exercises/05_kv_cache/exercises.md), each over its own small table: the
// library's version where one exists, and the student's. The chapter's test program runs every
// entry (the student's being the worked solutions), the exercise program the student's alone.
//   05.1 one GQA decode step: against a double oracle written here, head by head, and the head
//        mapping floor(i / (h/g)) read off outputs that name their kv head;
//   05.2 the paged append: the student's pool and a real tvlab::PagedKvCache driven through the
//        same appends, forks and frees, compared after every step;
//   05.3 the absorbed MLA scores: against the scores of the expanded keys (double oracle, and
//        ref::mla_naive's cache), and their softmax against ref::mla_absorbed_decode_attention.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/mla.hpp"
#include "tvlab/ref/mla_decode.hpp"
#include "tvlab/student/gqa_decode.hpp"
#include "tvlab/student/mla_decode.hpp"
#include "tvlab/student/paged_kv_cache.hpp"

namespace tvlab::kv {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

// ============================================================ 05.1 the GQA decode step

using GqaDecodeFn = std::function<ref::GqaDecodeOutput(const Tensor2&, const Tensor3&, const Tensor3&, std::size_t,
                                                       std::optional<double>)>;
struct GqaBackend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  GqaDecodeFn decode;
};
void PrintTo(const GqaBackend& b, std::ostream* out) { *out << b.name; }

const std::vector<GqaBackend>& gqa_backends() {
  static const std::vector<GqaBackend> all = {
      {.name = "ref", .kind = BackendKind::reference, .decode = ref::gqa_decode_attention},
      {.name = "student", .kind = BackendKind::student, .decode = student::gqa_decode_attention},
  };
  return all;
}

struct GqaCase {
  const char* label;
  std::size_t heads, kv_heads, d, d_v, length, capacity;
  double logit_scale;  // multiplies the queries: 1 for scores of order 1, 300 for scores in the hundreds
};
void PrintTo(const GqaCase& c, std::ostream* out) { *out << c.label; }

struct GqaInputs {
  Tensor2 q;
  Tensor3 k, v;
};

// q, k, v of N(0, 1); one key of every kv head pulled towards a query of its group, so that each
// softmax has a peak; the free slots (length .. capacity - 1) NaN, as ref::KvCache leaves them.
GqaInputs gqa_inputs(const GqaCase& c, std::uint64_t seed) {
  Rng rng(seed);
  GqaInputs in{rng.normal_matrix(c.heads, c.d), rng.normal_tensor(c.kv_heads, c.capacity, c.d),
               rng.normal_tensor(c.kv_heads, c.capacity, c.d_v)};
  for (std::size_t j = 0; j < c.kv_heads; ++j)
    for (std::size_t e = 0; e < c.d; ++e) in.k(j, (j * 5) % c.length, e) += 2.0f * in.q(j * (c.heads / c.kv_heads), e);
  in.q *= static_cast<float>(c.logit_scale);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  xt::view(in.k, xt::all(), xt::range(c.length, c.capacity), xt::all()) = nan;
  xt::view(in.v, xt::all(), xt::range(c.length, c.capacity), xt::all()) = nan;
  return in;
}

// The oracle from the definition, in double, for query head t reading kv head j (so that a failure
// can say which kv head a wrong output came from): s_p = scale q_t . k_jp over p < length,
// o = sum_p softmax_p(s) v_jp, lse = log sum_p e^{s_p}.
struct HeadOracle {
  std::vector<double> out;
  double lse = 0.0;
  double score_magnitude = 0.0;  // max_p scale sum_e |q_te k_jpe|: what a score's float error scales with
};
HeadOracle head_oracle(const GqaInputs& in, std::size_t t, std::size_t j, std::size_t length, double scale) {
  const std::size_t d = in.q.shape()[1], d_v = in.v.shape()[2];
  HeadOracle o{std::vector<double>(d_v, 0.0)};
  std::vector<double> s(length);
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t p = 0; p < length; ++p) {
    double dot = 0.0, size = 0.0;
    for (std::size_t e = 0; e < d; ++e) {
      dot += static_cast<double>(in.q(t, e)) * in.k(j, p, e);
      size += std::abs(static_cast<double>(in.q(t, e)) * in.k(j, p, e));
    }
    s[p] = scale * dot;
    m = std::max(m, s[p]);
    o.score_magnitude = std::max(o.score_magnitude, scale * size);
  }
  double sum = 0.0;
  for (std::size_t p = 0; p < length; ++p) sum += std::exp(s[p] - m);
  for (std::size_t p = 0; p < length; ++p)
    for (std::size_t e = 0; e < d_v; ++e) o.out[e] += std::exp(s[p] - m) / sum * in.v(j, p, e);
  o.lse = m + std::log(sum);
  return o;
}

class GqaDecodeExercise : public ::testing::TestWithParam<std::tuple<GqaBackend, GqaCase>> {};

TEST_P(GqaDecodeExercise, matches_the_double_oracle_head_by_head) {
  const auto& [impl, c] = GetParam();
  TVLAB_EXERCISE(impl, "05.1");
  const std::uint64_t seed = 700 + c.heads * 13 + c.kv_heads * 5 + c.length;
  const GqaInputs in = gqa_inputs(c, seed);
  const std::size_t group = c.heads / c.kv_heads;
  for (const std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.25}}) {
    const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(c.d)));
    DTensor2 expected_out = xt::zeros<double>({c.heads, c.d_v});
    DTensor1 expected_lse = xt::zeros<double>({c.heads});
    double magnitude = 0.0;
    for (std::size_t t = 0; t < c.heads; ++t) {
      const HeadOracle o = head_oracle(in, t, t / group, c.length, s);
      for (std::size_t e = 0; e < c.d_v; ++e) expected_out(t, e) = o.out[e];
      expected_lse(t) = o.lse;
      magnitude = std::max(magnitude, o.score_magnitude);
    }
    const ref::GqaDecodeOutput got = impl.decode(in.q, in.k, in.v, c.length, scale);
    // A score of size M carries a float error of about rtol M, which moves an output by at most
    // twice that times max|v| (attention_tolerance); lse is the largest score plus the log of a sum
    // of terms <= 1, so it carries about the same absolute error.
    const double max_v = xt::amax(xt::abs(xt::view(in.v, xt::all(), xt::range(0, c.length), xt::all())))();
    const Tolerance out_tol{attention_tolerance(c.d, c.length, magnitude, max_v), 0.0};
    const Tolerance lse_tol{1e-5 + reduction_rtol(std::max(c.d, c.length)) * magnitude, 0.0};
    const std::string what = std::string("gqa_decode_attention, ") + c.label + ", scale " +
                             (scale ? "0.25" : "1/sqrt(d)");
    // Which kv head's attention does the worst row equal? Names the usual mistake: i % g for i / (h/g).
    auto read_by = [&, s](const std::vector<std::size_t>& index) {
      const std::size_t t = index[0];
      std::ostringstream why;
      why << "query head " << t << " must read kv head floor(" << t << " / (" << c.heads << "/" << c.kv_heads
          << ")) = " << t / group;
      for (std::size_t j = 0; j < c.kv_heads; ++j) {
        const HeadOracle o = head_oracle(in, t, j, c.length, s);
        bool same = true;
        for (std::size_t e = 0; e < c.d_v; ++e) same = same && std::abs(got.out(t, e) - o.out[e]) <= 1e-4 * (1 + max_v);
        if (same && j != t / group) why << "; your row " << t << " is its attention over kv head " << j;
      }
      return why.str();
    };
    EXPECT_TRUE(matches(got.out, expected_out, out_tol,
                        {what + ": out",
                         {"t", "e"},
                         seed,
                         "tvlab kv --step",
                         "o_t = sum_{p < length} softmax_p(scale q_t . k_{kappa(t), p}) v_{kappa(t), p}, kappa(t) = "
                         "floor(t / (h/g)); subtract the row maximum before exp; the slots from length on are free "
                         "(NaN here) and must not be read",
                         read_by}));
    EXPECT_TRUE(matches(got.lse, expected_lse, lse_tol,
                        {what + ": lse", {"t"}, seed, "", "lse_t = m_t + log sum_p e^{s_tp - m_t}, m_t = max_p s_tp"}));
  }
}

const GqaCase kGqaCases[] = {
    {"MHA h 4 g 4, d 8, 6 of 9 slots", 4, 4, 8, 8, 6, 9, 1.0},
    {"GQA h 8 g 2, d 16, 13 of 16 slots", 8, 2, 16, 16, 13, 16, 1.0},
    {"GQA h 12 g 3, d 5, d_v 7, 37 of 37 slots", 12, 3, 5, 7, 37, 37, 1.0},
    {"MQA h 8 g 1, d 4, 1 of 4 slots", 8, 1, 4, 4, 1, 4, 1.0},
    {"MQA h 4 g 1, d 32, 129 of 130 slots", 4, 1, 32, 32, 129, 130, 1.0},
    {"GQA h 8 g 4, d 8, 20 of 24 slots, scores in the hundreds", 8, 4, 8, 8, 20, 24, 300.0},
};
INSTANTIATE_TEST_SUITE_P(Ch05, GqaDecodeExercise,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(gqa_backends(),
                                                                                           &GqaBackend::decode)),
                                            ::testing::ValuesIn(kGqaCases)),
                         tvlab::testing::ImplCaseName());

class GqaHeadMapping : public ::testing::TestWithParam<GqaBackend> {};

// With every value of kv head j equal to j, each query head's output is the number of the kv head
// it read, whatever the softmax: the mapping alone, visible.
TEST_P(GqaHeadMapping, query_head_i_reads_kv_head_i_over_h_over_g) {
  const GqaBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.1");
  const std::pair<std::size_t, std::size_t> shapes[] = {{8, 2}, {12, 3}, {6, 6}, {5, 1}, {16, 4}};
  for (const auto& [h, g] : shapes) {
    Rng rng(h * 10 + g);
    const Tensor2 q = rng.normal_matrix(h, 4);
    const Tensor3 k = rng.normal_tensor(g, 7, 4);
    Tensor3 v = Tensor3::from_shape({g, 7, 2});
    for (std::size_t j = 0; j < g; ++j) xt::view(v, j) = static_cast<float>(j);
    const ref::GqaDecodeOutput got = impl.decode(q, k, v, 7, std::nullopt);
    for (std::size_t i = 0; i < h; ++i)
      EXPECT_NEAR(got.out(i, 0), static_cast<double>(i / (h / g)), 1e-5)
          << "h = " << h << ", g = " << g << ": query head " << i << " read kv head " << got.out(i, 0)
          << " (every value of kv head j is j here); expected floor(" << i << " / (h/g)) = floor(" << i << " / "
          << h / g << ") = " << i / (h / g) << ": the groups are runs of h/g consecutive query heads, as Hugging "
          << "Face's repeat_kv orders them (not i mod g)";
  }
}

// GQA is MHA over the cache with each kv head repeated h/g times (repeat_kv): the same outputs.
TEST_P(GqaHeadMapping, equals_mha_over_the_cache_with_each_kv_head_repeated) {
  const GqaBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.1");
  const std::size_t h = 8, g = 2, n = 11;
  Rng rng(31);
  const Tensor2 q = rng.normal_matrix(h, 8);
  const Tensor3 k = rng.normal_tensor(g, n, 8), v = rng.normal_tensor(g, n, 6);
  Tensor3 k_rep = Tensor3::from_shape({h, n, 8}), v_rep = Tensor3::from_shape({h, n, 6});
  for (std::size_t i = 0; i < h; ++i) {
    xt::view(k_rep, i) = xt::view(k, i / (h / g));
    xt::view(v_rep, i) = xt::view(v, i / (h / g));
  }
  const ref::GqaDecodeOutput gqa = impl.decode(q, k, v, n, std::nullopt);
  const ref::GqaDecodeOutput mha = impl.decode(q, k_rep, v_rep, n, std::nullopt);
  DTensor2 expected = xt::cast<double>(mha.out);
  EXPECT_TRUE(matches(gqa.out, expected, {1e-6, 1e-6},
                      {"GQA h 8 g 2 against MHA over the repeated cache", {"t", "e"}, 31, "",
                       "the same function: GQA only avoids storing the h/g copies"}));
}

TEST_P(GqaHeadMapping, bad_heads_and_bad_input_are_refused_naming_the_parameter) {
  const GqaBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.1");
  Rng rng(3);
  const Tensor2 q = rng.normal_matrix(12, 8);
  const Tensor3 k = rng.normal_tensor(4, 6, 8), v = rng.normal_tensor(4, 6, 8);
  auto decode = [&impl](const Tensor2& q_, const Tensor3& k_, const Tensor3& v_, std::size_t length,
                        std::optional<double> scale = std::nullopt) {
    return [&impl, q_, k_, v_, length, scale] { impl.decode(q_, k_, v_, length, scale); };
  };
  const Tensor3 no_kv_head = Tensor3::from_shape({0, 6, 8});
  EXPECT_TRUE(throws_error_naming(decode(q, no_kv_head, no_kv_head, 4), {"k_cache"}))
      << "g = 0 (a k_cache of shape [0, 6, 8]): there is no kv head to read, and h/g would divide by zero";
  const Tensor3 five_k = rng.normal_tensor(5, 6, 8), five_v = rng.normal_tensor(5, 6, 8);
  EXPECT_TRUE(throws_error_naming(decode(q, five_k, five_v, 4), {"multiple", "12", "5"}))
      << "h = 12, g = 5: 5 kv heads cannot serve 12 query heads in equal groups";
  EXPECT_TRUE(throws_error_naming(decode(q, k, v, 0), {"length"})) << "length 0";
  EXPECT_TRUE(throws_error_naming(decode(q, k, v, 7), {"length"})) << "length 7 > capacity 6";
  const Tensor3 narrow_k = xt::view(k, xt::all(), xt::all(), xt::range(0, 7));
  EXPECT_TRUE(throws_error_naming(decode(q, narrow_k, v, 4), {"k_cache"})) << "k_cache of head_dim 7, q of 8";
  const Tensor3 three_v = xt::view(v, xt::range(0, 3), xt::all(), xt::all());
  EXPECT_TRUE(throws_error_naming(decode(q, k, three_v, 4), {"v_cache"})) << "v_cache of 3 kv heads, k_cache of 4";
  EXPECT_TRUE(throws_error_naming(decode(q, k, v, 4, -1.0), {"scale"})) << "scale -1";
  Tensor2 q_nan = q;
  q_nan(2, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(decode(q_nan, k, v, 4), {"q"})) << "q with a NaN";
}

INSTANTIATE_TEST_SUITE_P(Ch05, GqaHeadMapping,
                         ::testing::ValuesIn(tvlab::testing::under_test(gqa_backends(), &GqaBackend::decode)),
                         tvlab::testing::ImplName());

// ============================================================ 05.2 the paged append

using PagedAppendFn = std::function<student::TokenSlot(student::PagedPool&, student::PagedSequence&, const Tensor2&,
                                                       const Tensor2&)>;
struct PagedBackend {
  std::string name;
  BackendKind kind = BackendKind::student;
  Capabilities caps;
  PagedAppendFn append;
};
void PrintTo(const PagedBackend& b, std::ostream* out) { *out << b.name; }

// The library's version is the class tvlab::PagedKvCache itself, which every test runs beside the
// student's structs; the table has the student's entry alone.
const std::vector<PagedBackend>& paged_backends() {
  static const std::vector<PagedBackend> all = {
      {.name = "student", .kind = BackendKind::student, .append = student::paged_append},
  };
  return all;
}

std::string list_text(const std::vector<std::size_t>& xs) {
  std::string out = "{";
  for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + std::to_string(xs[i]);
  return out + "}";
}

// A real PagedKvCache and the student's pool, driven through the same operations; the sequences are
// kept under the real cache's ids. Each token's key and value are numbered (token u of the run has
// key entries u + (h d + c)/100 and value entries -(...)), so that every slot says which token it holds.
class TwinCaches {
 public:
  TwinCaches(const PagedBackend& impl, const PagedKvConfig& cfg)
      : impl_(impl), cfg_(cfg), real_(cfg), pool_(student::make_paged_pool(cfg)) {}

  SequenceId add() {
    const SequenceId id = real_.add_sequence();
    mine_[id] = {};
    return id;
  }
  SequenceId fork(SequenceId parent) {
    const SequenceId id = real_.fork(parent);
    mine_[id] = student::paged_fork(pool_, mine_.at(parent));
    return id;
  }
  void free(SequenceId seq) {
    real_.free(seq);
    student::paged_free(pool_, mine_.at(seq));
    mine_.erase(seq);
  }
  // Appends the next numbered token to both; returns the failure when they disagree.
  ::testing::AssertionResult append(SequenceId seq, const std::string& step) {
    const auto [k, v] = token(next_token_++);
    const std::size_t t = real_.length(seq);
    const bool shared_before = t % cfg_.block_size != 0 && real_.ref_count(real_.block_table(seq).back()) > 1;
    real_.append(seq, k, v);
    const student::TokenSlot got = impl_.append(pool_, mine_.at(seq), k, v);
    const std::size_t b = cfg_.block_size;
    const std::size_t block = real_.block_table(seq)[t / b];
    if (got.block != block || got.slot != t % b) {
      return ::testing::AssertionFailure()
             << step << ": token " << t << " went to (block " << got.block << ", slot " << got.slot
             << "); PagedKvCache put it in (block " << block << ", slot " << t % b << "): block = table[t / b] = table["
             << t / b << "] after the append, slot = t mod b = " << t << " mod " << b
             << (shared_before ? "; the last block was shared, so the table points at its copy now" : "");
    }
    return same_state(step + " (token " + std::to_string(t) + (shared_before ? ", its last block shared" : "") + ")");
  }

  // Every field of the two caches, with the first difference explained.
  ::testing::AssertionResult same_state(const std::string& step) const {
    auto failure = [&step] { return ::testing::AssertionFailure() << step << ": "; };
    for (const auto& [id, s] : mine_) {
      if (s.length != real_.length(id))
        return failure() << "sequence " << id << " has length " << s.length << ", PagedKvCache's " << real_.length(id)
                         << ": an append adds one token";
      if (s.block_table != real_.block_table(id))
        return failure() << "sequence " << id << "'s block table is " << list_text(s.block_table) << ", PagedKvCache's "
                         << list_text(real_.block_table(id))
                         << ": a new block comes from the back of the free stack when t mod b = 0; a shared last block "
                            "(count > 1) is replaced by its copy before the write";
    }
    for (std::size_t block = 0; block < cfg_.num_blocks; ++block)
      if (pool_.ref_counts[block] != real_.ref_count(block))
        return failure() << "block " << block << " has reference count " << pool_.ref_counts[block]
                         << ", PagedKvCache's " << real_.ref_count(block)
                         << ": a count is the number of block tables that point at the block (a taken block starts at "
                            "1; copy-on-write moves one reference from the shared block to its copy)";
    if (pool_.free_list != real_.free_list())
      return failure() << "the free stack is " << list_text(pool_.free_list) << ", PagedKvCache's "
                       << list_text(real_.free_list()) << ": take blocks from its back (pop_back)";
    if (pool_.copies != real_.copy_on_write_count())
      return failure() << pool_.copies << " copy-on-write copies counted, PagedKvCache " << real_.copy_on_write_count();
    for (const auto& [name, mine, theirs] :
         {std::tuple<const char*, const Tensor4*, const Tensor4*>{"key", &pool_.keys, &real_.key_blocks()},
          {"value", &pool_.values, &real_.value_blocks()}})
      for (std::size_t i = 0; i < mine->size(); ++i) {
        const float a = mine->data()[i], e = theirs->data()[i];
        if (!(a == e || (std::isnan(a) && std::isnan(e)))) {
          const std::size_t per_block = cfg_.num_kv_heads * cfg_.block_size * cfg_.head_dim;
          const std::size_t blk = i / per_block, head = i % per_block / (cfg_.block_size * cfg_.head_dim);
          const std::size_t slot = i % (cfg_.block_size * cfg_.head_dim) / cfg_.head_dim, c = i % cfg_.head_dim;
          return failure() << "the " << name << " pool differs at (block " << blk << ", head " << head << ", slot "
                           << slot << ", c " << c << "): yours " << a << ", PagedKvCache's " << e
                           << " (token u is stored as u + (h d + c)/100; NaN is a slot never written). A copy "
                              "must take the whole shared block, every head and slot, before the new token is written";
        }
      }
    return ::testing::AssertionSuccess();
  }

  const PagedKvCache& real() const { return real_; }
  const student::PagedPool& pool() const { return pool_; }
  const student::PagedSequence& sequence(SequenceId id) const { return mine_.at(id); }
  std::pair<Tensor2, Tensor2> token(std::size_t u) const {
    Tensor2 k = Tensor2::from_shape({cfg_.num_kv_heads, cfg_.head_dim}), v = k;
    for (std::size_t h = 0; h < cfg_.num_kv_heads; ++h)
      for (std::size_t c = 0; c < cfg_.head_dim; ++c) {
        k(h, c) = static_cast<float>(u) + static_cast<float>(h * cfg_.head_dim + c) / 100.0f;
        v(h, c) = -k(h, c);
      }
    return {k, v};
  }

  const PagedBackend& impl_;
  PagedKvConfig cfg_;
  PagedKvCache real_;
  student::PagedPool pool_;
  std::map<SequenceId, student::PagedSequence> mine_;
  std::size_t next_token_ = 1;
};

class PagedAppendExercise : public ::testing::TestWithParam<PagedBackend> {};

// Section 4.4 of the vLLM paper: parallel sampling shares the prompt's blocks; the first write to a
// shared, partly filled block copies it; a child whose parent ends on a full block takes a new one.
TEST_P(PagedAppendExercise, appends_forks_and_frees_leave_the_pool_as_paged_kv_cache_does) {
  const PagedBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.2");
  TwinCaches twins(impl, {.num_blocks = 10, .block_size = 4, .num_kv_heads = 2, .head_dim = 3});
  const SequenceId prompt = twins.add();
  for (int u = 0; u < 6; ++u) ASSERT_TRUE(twins.append(prompt, "the prompt's 6 tokens (blocks of 4)"));
  const SequenceId sample = twins.fork(prompt);
  ASSERT_TRUE(twins.same_state("fork of the prompt"));
  ASSERT_TRUE(twins.append(sample, "first append to the fork: its last block (2 of 4 slots) is shared"));
  ASSERT_TRUE(twins.append(prompt, "append to the parent: its last block is its own again"));
  ASSERT_TRUE(twins.append(sample, "second append to the fork: its copy is its own"));
  ASSERT_TRUE(twins.append(sample, "the fork fills its copy"));
  ASSERT_TRUE(twins.append(sample, "the fork's fifth token past the prompt: a new block"));
  const SequenceId beam = twins.fork(sample);
  ASSERT_TRUE(twins.append(beam, "append to a fork of the fork"));
  twins.free(prompt);
  ASSERT_TRUE(twins.same_state("free of the prompt"));
  const SequenceId full = twins.add();
  for (int u = 0; u < 4; ++u) ASSERT_TRUE(twins.append(full, "a new sequence reuses the freed blocks"));
  const SequenceId child = twins.fork(full);
  ASSERT_TRUE(twins.append(child, "append to a fork whose parent ends on a full block: a new block, no copy"));
  ASSERT_TRUE(twins.append(full, "append to that parent: a new block too"));
  twins.free(beam);
  twins.free(sample);
  ASSERT_TRUE(twins.same_state("free of both forks"));
  for (int u = 0; u < 9; ++u) ASSERT_TRUE(twins.append(child, "the last child grows over 3 more blocks"));
}

// The lookup: token t of a sequence is in block table[t / b], slot t mod b, for every block size.
TEST_P(PagedAppendExercise, every_token_is_where_its_block_table_says) {
  const PagedBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.2");
  for (const std::size_t b : {1, 3, 16}) {
    const std::string where = "block_size " + std::to_string(b);
    TwinCaches twins(impl, {.num_blocks = 64 / b + 8, .block_size = b, .num_kv_heads = 3, .head_dim = 2});
    const SequenceId first = twins.add(), second = twins.add();
    for (int u = 0; u < 20; ++u) {
      ASSERT_TRUE(twins.append(first, where + ", interleaved appends to two sequences"));
      ASSERT_TRUE(twins.append(second, where + ", interleaved appends to two sequences"));
    }
    const SequenceId fork = twins.fork(first);
    for (int u = 0; u < 5; ++u) ASSERT_TRUE(twins.append(fork, where + ", appends to a fork"));
    for (const SequenceId id : {first, second, fork}) {
      const student::PagedSequence& s = twins.sequence(id);
      const Tensor3 keys = twins.real().gather_keys(id);
      for (std::size_t t = 0; t < s.length; ++t)
        for (std::size_t h = 0; h < 3; ++h)
          for (std::size_t c = 0; c < 2; ++c)
            ASSERT_EQ(twins.pool().keys(s.block_table[t / b], h, t % b, c), keys(h, t, c))
                << where << ", sequence " << id << ", token " << t << ": pool.keys(table[t / b] = "
                << s.block_table[t / b] << ", h " << h << ", slot t mod b = " << t % b << ", c " << c
                << ") must hold the token's key";
    }
  }
}

TEST_P(PagedAppendExercise, an_append_that_needs_a_block_when_none_is_free_is_refused_and_changes_nothing) {
  const PagedBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.2");
  const PagedKvConfig cfg{.num_blocks = 2, .block_size = 2, .num_kv_heads = 1, .head_dim = 2};
  TwinCaches twins(impl, cfg);
  const SequenceId a = twins.add();
  for (int u = 0; u < 3; ++u) ASSERT_TRUE(twins.append(a, "3 tokens fill 1.5 of the 2 blocks"));
  const SequenceId b = twins.fork(a);
  // The fork's last block is shared and half full: writing needs a copy, and no block is free.
  const auto [k, v] = twins.token(99);
  student::PagedPool pool = twins.pool();
  student::PagedSequence seq = twins.sequence(b);
  EXPECT_THROW(PagedKvCache(twins.real()).append(b, k, v), Error) << "the real cache refuses it too";
  EXPECT_TRUE(throws_error_naming([&] { impl.append(pool, seq, k, v); }, {"free block"}))
      << "copy-on-write of the fork's shared last block needs a free block, and the pool has none";
  EXPECT_EQ(seq.block_table, twins.sequence(b).block_table) << "a refused append must leave the table as it was";
  EXPECT_EQ(seq.length, twins.sequence(b).length) << "a refused append must leave the length as it was";
  EXPECT_EQ(pool.ref_counts, twins.pool().ref_counts) << "a refused append must leave the counts as they were";
  EXPECT_EQ(pool.free_list, twins.pool().free_list) << "a refused append must leave the free stack as it was";
  // Without the fork the parent's last block is its own again: it fills it in place, and its next
  // token needs a third block of the two.
  twins.free(b);
  ASSERT_TRUE(twins.append(a, "the parent fills its second block"));
  pool = twins.pool();
  seq = twins.sequence(a);
  EXPECT_TRUE(throws_error_naming([&] { impl.append(pool, seq, k, v); }, {"free block"}))
      << "token 4 needs a third block; the pool has 2";
  EXPECT_EQ(seq.length, 4u) << "a refused append must leave the length as it was";
  EXPECT_EQ(pool.free_list, twins.pool().free_list) << "a refused append must leave the free stack as it was";
}

TEST_P(PagedAppendExercise, a_bad_token_or_a_bad_table_is_refused) {
  const PagedBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.2");
  student::PagedPool pool = student::make_paged_pool({.num_blocks = 4, .block_size = 2, .num_kv_heads = 2, .head_dim = 3});
  student::PagedSequence seq;
  const Tensor2 good = xt::ones<float>({2, 3}), wide = xt::ones<float>({2, 4}), one_head = xt::ones<float>({1, 3});
  EXPECT_TRUE(throws_error_naming([&] { impl.append(pool, seq, wide, good); }, {"k_t"})) << "k_t [2, 4], head_dim 3";
  EXPECT_TRUE(throws_error_naming([&] { impl.append(pool, seq, good, one_head); }, {"v_t"}))
      << "v_t [1, 3], num_kv_heads 2";
  Tensor2 nan = good;
  nan(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.append(pool, seq, good, nan); }, {"v_t"})) << "v_t with a NaN";
  EXPECT_EQ(seq.length, 0u) << "a refused append stores nothing";
  EXPECT_EQ(pool.free_list.size(), 4u) << "a refused append takes no block";
  student::PagedSequence no_table{.block_table = {}, .length = 3};
  EXPECT_TRUE(throws_error_naming([&] { impl.append(pool, no_table, good, good); }, {"seq"}))
      << "a sequence of 3 tokens with an empty block table: token 3 would be looked up in table[0]";
  student::PagedSequence free_block{.block_table = {2}, .length = 1};
  EXPECT_TRUE(throws_error_naming([&] { impl.append(pool, free_block, good, good); }, {"seq"}))
      << "a table that points at block 2, which is free (reference count 0)";
}

INSTANTIATE_TEST_SUITE_P(Ch05, PagedAppendExercise,
                         ::testing::ValuesIn(tvlab::testing::under_test(paged_backends(), &PagedBackend::append)),
                         tvlab::testing::ImplName());

// ============================================================ 05.3 the absorbed MLA scores

using MlaScoresFn = std::function<Tensor2(const Tensor2&, const Tensor2&, const Tensor2&, const Tensor2&,
                                          const Tensor2&, const MlaConfig&)>;
struct MlaBackend {
  std::string name;
  BackendKind kind = BackendKind::student;
  Capabilities caps;
  MlaScoresFn scores;
};
void PrintTo(const MlaBackend& b, std::ostream* out) { *out << b.name; }

// The library computes these scores inside ref::mla_absorbed_decode_attention and does not return
// them: the tests hold the student's against the expanded keys and against that function's output.
const std::vector<MlaBackend>& mla_backends() {
  static const std::vector<MlaBackend> all = {
      {.name = "student", .kind = BackendKind::student, .scores = student::mla_absorbed_scores},
  };
  return all;
}

struct MlaCase {
  const char* label;
  int heads, d_c, d_h, d_r;
  std::size_t n;
};
void PrintTo(const MlaCase& c, std::ostream* out) { *out << c.label; }

MlaConfig mla_config(const MlaCase& c) {
  MlaConfig cfg;
  cfg.hidden_size = 2 * c.d_c;
  cfg.num_heads = c.heads;
  cfg.kv_lora_rank = c.d_c;
  cfg.qk_nope_head_dim = c.d_h;
  cfg.qk_rope_head_dim = c.d_r;
  cfg.v_head_dim = c.d_h;
  return cfg;
}

struct MlaInputs {
  Tensor2 q_nope, q_rope, w_uk, latents, rope_keys;
};
// Latents and RoPE keys of N(0, 1) (the latent leaves an RMSNorm), W^UK of N(0, 1/d_c) as a trained
// projection keeps its input's scale, queries of N(0, 1).
MlaInputs mla_inputs(const MlaCase& c, std::uint64_t seed) {
  Rng rng(seed);
  const std::size_t h = c.heads, d_c = c.d_c, d_h = c.d_h, d_r = c.d_r;
  return {rng.normal_matrix(h, d_h), rng.normal_matrix(h, d_r),
          rng.normal_matrix(d_c, h * d_h, 0.0, 1.0 / std::sqrt(static_cast<double>(d_c))),
          rng.normal_matrix(c.n, d_c), rng.normal_matrix(c.n, d_r)};
}

// The naive scores, in double: every head's key expanded, k^C_ji = W^UK_i c^KV_j, then
// s_ij = ([q^C_i; q^R_i] . [k^C_ji; k^R_j]) * rope_weight / sqrt(width); the defaults are MLA's,
// the others give the usual mistakes for the failure message.
DTensor2 naive_scores(const MlaInputs& in, const MlaCase& c, double width, double rope_weight = 1.0,
                      bool head_zero_only = false) {
  const std::size_t h = c.heads, d_c = c.d_c, d_h = c.d_h, d_r = c.d_r;
  DTensor2 s = xt::zeros<double>({h, c.n});
  for (std::size_t i = 0; i < h; ++i) {
    const std::size_t w_head = head_zero_only ? 0 : i;
    for (std::size_t j = 0; j < c.n; ++j) {
      double dot = 0.0;
      for (std::size_t e = 0; e < d_h; ++e) {
        double key = 0.0;  // k^C_ji[e] = sum_c W^UK(c, i d_h + e) c^KV_j[c]
        for (std::size_t cc = 0; cc < d_c; ++cc) key += static_cast<double>(in.w_uk(cc, w_head * d_h + e)) * in.latents(j, cc);
        dot += static_cast<double>(in.q_nope(i, e)) * key;
      }
      for (std::size_t e = 0; e < d_r; ++e) dot += rope_weight * static_cast<double>(in.q_rope(i, e)) * in.rope_keys(j, e);
      s(i, j) = dot / std::sqrt(width);
    }
  }
  return s;
}

// max_ij of the sum of the absolute terms of s_ij (through q~, whose error scales the same way):
// what a float score's error is proportional to.
double mla_score_magnitude(const MlaInputs& in, const MlaCase& c) {
  const std::size_t h = c.heads, d_c = c.d_c, d_h = c.d_h, d_r = c.d_r;
  double most = 0.0;
  for (std::size_t i = 0; i < h; ++i) {
    std::vector<double> q_abs(d_c, 0.0);
    for (std::size_t cc = 0; cc < d_c; ++cc)
      for (std::size_t e = 0; e < d_h; ++e) q_abs[cc] += std::abs(static_cast<double>(in.w_uk(cc, i * d_h + e)) * in.q_nope(i, e));
    for (std::size_t j = 0; j < c.n; ++j) {
      double size = 0.0;
      for (std::size_t cc = 0; cc < d_c; ++cc) size += q_abs[cc] * std::abs(static_cast<double>(in.latents(j, cc)));
      for (std::size_t e = 0; e < d_r; ++e) size += std::abs(static_cast<double>(in.q_rope(i, e)) * in.rope_keys(j, e));
      most = std::max(most, size / std::sqrt(static_cast<double>(c.d_h + c.d_r)));
    }
  }
  return most;
}

class MlaScoresExercise : public ::testing::TestWithParam<std::tuple<MlaBackend, MlaCase>> {};

TEST_P(MlaScoresExercise, equal_the_scores_against_the_expanded_keys) {
  const auto& [impl, c] = GetParam();
  TVLAB_EXERCISE(impl, "05.3");
  const std::uint64_t seed = 900 + c.heads + c.d_c + c.n;
  const MlaInputs in = mla_inputs(c, seed);
  const MlaConfig cfg = mla_config(c);
  const DTensor2 expected = naive_scores(in, c, c.d_h + c.d_r);
  const Tensor2 got = impl.scores(in.q_nope, in.q_rope, in.w_uk, in.latents, in.rope_keys, cfg);
  // A float score is a reduction of d_c + d_h^R products (after d_h for each q~ entry): its error is
  // about reduction_rtol of that length times the sum of the absolute terms.
  const Tolerance tol{reduction_rtol(static_cast<std::size_t>(c.d_c * c.d_h + c.d_r)) * mla_score_magnitude(in, c),
                      0.0};
  // The usual mistakes, each a closed form: which one do the student's scores equal?
  auto diagnose = [&](const std::vector<std::size_t>&) -> std::string {
    const std::pair<const char*, DTensor2> mistakes[] = {
        {"the content part alone: the decoupled RoPE term q^R_i . k^R_j is missing",
         naive_scores(in, c, c.d_h + c.d_r, 0.0)},
        {"the scale 1/sqrt(d_h): MLA's is 1/sqrt(d_h + d_h^R), the width of [q^C; q^R]", naive_scores(in, c, c.d_h)},
        {"the scale 1/sqrt(d_c + d_h^R), the width of the absorbed query: MLA keeps 1/sqrt(d_h + d_h^R)",
         naive_scores(in, c, c.d_c + c.d_r)},
        {"no scale at all: divide by sqrt(d_h + d_h^R)", naive_scores(in, c, 1.0)},
        {"head 0's W^UK for every head: head i owns columns [i d_h, (i+1) d_h) of w_uk",
         naive_scores(in, c, c.d_h + c.d_r, 1.0, true)},
    };
    for (const auto& [what, scores] : mistakes)
      if (compare(got, scores, tol).ok()) return std::string("your scores equal ") + what;
    return "s_ij = (q~_i . c^KV_j + q^R_i . k^R_j) / sqrt(d_h + d_h^R) with q~_i[c] = sum_e W^UK(c, i d_h + e) q^C_i[e]";
  };
  EXPECT_TRUE(matches(got, expected, tol,
                      {std::string("mla_absorbed_scores, ") + c.label, {"i", "j"}, seed, "",
                       "the absorbed score q~_i . c^KV_j equals the naive q^C_i . (W^UK_i c^KV_j): the keys need not "
                       "be built",
                       diagnose}));
}

// The softmax of the scores, weighting the latents, is the attention core of the absorbed decode step.
TEST_P(MlaScoresExercise, their_softmax_is_the_absorbed_decode_attention) {
  const auto& [impl, c] = GetParam();
  TVLAB_EXERCISE(impl, "05.3");
  const std::uint64_t seed = 950 + c.heads + c.d_c + c.n;
  const MlaInputs in = mla_inputs(c, seed);
  const MlaConfig cfg = mla_config(c);
  const Tensor2 s = impl.scores(in.q_nope, in.q_rope, in.w_uk, in.latents, in.rope_keys, cfg);
  // ref's input: the absorbed query [W^UK_i^T q^C_i; q^R_i], formed here in double.
  const std::size_t h = c.heads, d_c = c.d_c, d_h = c.d_h, d_r = c.d_r;
  Tensor2 q_absorbed = Tensor2::from_shape({h, d_c + d_r});
  for (std::size_t i = 0; i < h; ++i) {
    for (std::size_t cc = 0; cc < d_c; ++cc) {
      double sum = 0.0;
      for (std::size_t e = 0; e < d_h; ++e) sum += static_cast<double>(in.w_uk(cc, i * d_h + e)) * in.q_nope(i, e);
      q_absorbed(i, cc) = static_cast<float>(sum);
    }
    for (std::size_t e = 0; e < d_r; ++e) q_absorbed(i, d_c + e) = in.q_rope(i, e);
  }
  const ref::MlaDecodeAttention expected =
      ref::mla_absorbed_decode_attention(q_absorbed, in.latents, in.rope_keys, c.n, mla_softmax_scale(cfg));
  DTensor2 out = xt::zeros<double>({h, d_c});
  DTensor1 lse = xt::zeros<double>({h});
  for (std::size_t i = 0; i < h; ++i) {
    double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (std::size_t j = 0; j < c.n; ++j) m = std::max(m, static_cast<double>(s(i, j)));
    for (std::size_t j = 0; j < c.n; ++j) sum += std::exp(s(i, j) - m);
    for (std::size_t j = 0; j < c.n; ++j)
      for (std::size_t cc = 0; cc < d_c; ++cc) out(i, cc) += std::exp(s(i, j) - m) / sum * in.latents(j, cc);
    lse(i) = m + std::log(sum);
  }
  // Both sides round the scores to float once (magnitude M); a score error of rtol M moves a weight
  // by a factor e^{+-2 rtol M}, an output by at most 2 rtol M max|c^KV|.
  const double m = mla_score_magnitude(in, c), max_c = xt::amax(xt::abs(in.latents))();
  const double rtol = reduction_rtol(static_cast<std::size_t>(c.d_c * c.d_h + c.d_r));
  EXPECT_TRUE(matches(expected.out_latent, out, {4 * rtol * m * max_c + 1e-6, 0.0},
                      {std::string("softmax of mla_absorbed_scores times c^KV against ref::mla_absorbed_decode_attention, ") +
                           c.label,
                       {"i", "c"}, seed, "", "a_i = sum_j softmax_j(s_ij) c^KV_j"}));
  EXPECT_TRUE(matches(expected.lse, lse, {4 * rtol * m + 1e-6, 0.0},
                      {std::string("log-sum-exp of mla_absorbed_scores, ") + c.label, {"i"}, seed, "",
                       "L_i = log sum_j e^{s_ij}"}));
}

const MlaCase kMlaCases[] = {
    {"n_h 4, d_c 8, d_h 8, d_h^R 4, 1 position", 4, 8, 8, 4, 1},
    {"n_h 4, d_c 8, d_h 8, d_h^R 4, 9 positions", 4, 8, 8, 4, 9},
    {"n_h 16, d_c 64, d_h 16, d_h^R 16, 33 positions (DeepSeek's shape scaled down)", 16, 64, 16, 16, 33},
    {"n_h 3, d_c 5, d_h 7, d_h^R 2, 6 positions", 3, 5, 7, 2, 6},
    {"n_h 128, d_c 512, d_h 128, d_h^R 64, 3 positions (DeepSeek-V2's widths)", 128, 512, 128, 64, 3},
};
INSTANTIATE_TEST_SUITE_P(Ch05, MlaScoresExercise,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(mla_backends(),
                                                                                           &MlaBackend::scores)),
                                            ::testing::ValuesIn(kMlaCases)),
                         tvlab::testing::ImplCaseName());

class MlaScoresLayer : public ::testing::TestWithParam<MlaBackend> {};

// On a real layer: the projections of ref::mla_project, the naive cache of ref::mla_naive (every
// head's key [k^C; k^R] expanded), the absorbed cache of ref::mla_absorbed (c^KV and k^R only).
TEST_P(MlaScoresLayer, on_a_layer_equal_the_scores_against_mla_naives_cache) {
  const MlaBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.3");
  MlaConfig cfg;  // hidden 32, 4 heads, d_c 8, d_h 8, d_h^R 4, d_v 8
  cfg.q_lora_rank = 12;
  const std::size_t h = 4, d_h = 8, d_r = 4, d_c = 8, n = 7;
  Rng rng(77);
  MlaWeights w;
  auto matrix = [&](std::size_t rows, std::size_t cols) {
    return rng.normal_matrix(rows, cols, 0.0, 1.0 / std::sqrt(static_cast<double>(rows)));
  };
  w.w_dq = matrix(32, 12);
  w.q_norm = rng.normal_vector(12, 1.0, 0.2);
  w.w_uq = matrix(12, h * d_h);
  w.w_qr = matrix(12, h * d_r);
  w.w_dkv = matrix(32, d_c);
  w.kv_norm = rng.normal_vector(d_c, 1.0, 0.2);
  w.w_kr = matrix(32, d_r);
  w.w_uk = matrix(d_c, h * d_h);
  w.w_uv = matrix(d_c, h * 8);
  w.w_o = matrix(h * 8, 32);
  const Tensor2 x = rng.normal_matrix(n, 32);
  MlaCache naive(cfg, MlaPath::naive), absorbed(cfg, MlaPath::absorbed);
  ref::mla_naive(x, w, cfg, naive);
  ref::mla_absorbed(x, w, cfg, absorbed);
  const ref::MlaProjections p = ref::mla_project(x, w, cfg);
  // The last token's queries against every cached position (itself included).
  const Tensor2 q_nope = xt::view(p.q_nope, xt::all(), n - 1, xt::all());
  const Tensor2 q_rope = xt::view(p.q_rope, xt::all(), n - 1, xt::all());
  const Tensor2 got = impl.scores(q_nope, q_rope, w.w_uk, absorbed.latents, absorbed.rope_keys, cfg);
  DTensor2 expected = xt::zeros<double>({h, n});
  for (std::size_t i = 0; i < h; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double dot = 0.0;  // [q^C; q^R] . [k^C; k^R], the key as the naive cache holds it
      for (std::size_t e = 0; e < d_h; ++e) dot += static_cast<double>(q_nope(i, e)) * naive.keys(i, j, e);
      for (std::size_t e = 0; e < d_r; ++e) dot += static_cast<double>(q_rope(i, e)) * naive.keys(i, j, d_h + e);
      expected(i, j) = dot / std::sqrt(static_cast<double>(d_h + d_r));
    }
  // The naive keys were rounded to float once (k^C = W^UK c^KV, a reduction of d_c): the scores of
  // order 1 then differ by a few float roundings of d_c d_h terms.
  EXPECT_TRUE(matches(got, expected, {1e-5, reduction_rtol(d_c * d_h)},
                      {"mla_absorbed_scores on a layer (hidden 32, n_h 4, d_c 8, d_h 8, d_h^R 4), 7 tokens",
                       {"i", "j"}, 77, "tvlab kv",
                       "the absorbed cache holds only c^KV and k^R, the naive one every head's [W^UK_i c^KV_j; k^R_j]; "
                       "both give the same scores"}));
}

TEST_P(MlaScoresLayer, bad_input_is_refused_naming_the_parameter) {
  const MlaBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "05.3");
  const MlaCase c{"n_h 4", 4, 8, 8, 4, 5};
  const MlaInputs in = mla_inputs(c, 5);
  const MlaConfig cfg = mla_config(c);
  auto call = [&impl](MlaInputs x, MlaConfig k) {
    return [&impl, x, k] { impl.scores(x.q_nope, x.q_rope, x.w_uk, x.latents, x.rope_keys, k); };
  };
  MlaInputs bad = in;
  bad.q_nope = xt::view(in.q_nope, xt::all(), xt::range(0, 7));
  EXPECT_TRUE(throws_error_naming(call(bad, cfg), {"q_nope"})) << "q_nope with 7 columns, qk_nope_head_dim 8";
  bad = in;
  bad.q_rope = xt::view(in.q_rope, xt::range(0, 3), xt::all());
  EXPECT_TRUE(throws_error_naming(call(bad, cfg), {"q_rope"})) << "q_rope of 3 heads, num_heads 4";
  bad = in;
  bad.w_uk = xt::view(in.w_uk, xt::all(), xt::range(0, 24));
  EXPECT_TRUE(throws_error_naming(call(bad, cfg), {"w_uk"})) << "w_uk with 24 columns, num_heads * d_h = 32";
  bad = in;
  bad.rope_keys = xt::view(in.rope_keys, xt::range(0, 4), xt::all());
  EXPECT_TRUE(throws_error_naming(call(bad, cfg), {"rope_keys"})) << "4 RoPE keys for 5 latents";
  bad = in;
  bad.latents = Tensor2::from_shape({0, 8});
  bad.rope_keys = Tensor2::from_shape({0, 4});
  EXPECT_TRUE(throws_error_naming(call(bad, cfg), {"latents"})) << "an empty cache: no position to score";
  bad = in;
  bad.latents(2, 3) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming(call(bad, cfg), {"latents"})) << "a latent with inf";
  MlaConfig odd = cfg;
  odd.qk_rope_head_dim = 3;
  EXPECT_TRUE(throws_error_naming(call(in, odd), {"qk_rope_head_dim"})) << "an odd qk_rope_head_dim: RoPE rotates pairs";
}

INSTANTIATE_TEST_SUITE_P(Ch05, MlaScoresLayer,
                         ::testing::ValuesIn(tvlab::testing::under_test(mla_backends(), &MlaBackend::scores)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::kv

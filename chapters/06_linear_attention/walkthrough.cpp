// `tvlab 06_linear_attention` (alias `tvlab linear`): kernelised linear attention. --step walks the
// documents' worked example (one query, three keys: softmax weights against the ReLU kernel's
// scores, and where the two rankings part); a run computes the non-causal form and the causal
// form three ways (recurrence, masked parallel, chunks), Gated DeltaNet and the Performer through
// every backend of the registry;
// --markdown prints results.md and `tvlab tour` checks the agreement and the documents' numbers.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/analysis/linear_state_memory.hpp"
#include "tvlab/analysis/low_rank.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/performer.hpp"

namespace tvlab::cli {
namespace {

using linear::backends;

struct Options : StandardOptions {
  int seq = 12, heads = 2, dim = 8, chunk = 5, performer_features = 32;
  std::string feature_map = "elu_plus_one";
};

FeatureMap parse_feature_map(const std::string& name) {
  if (name == "relu") return FeatureMap::relu;
  if (name == "identity") return FeatureMap::identity;
  return FeatureMap::elu_plus_one;
}

// ---- The documents' worked examples (000 L93-L99), one query against three keys, scale 1 ----

struct KernelExample {
  const char* source;
  std::vector<double> q;
  std::vector<std::vector<double>> keys;
};

// 000 L93-L97: q = [1, 2, 1]; k_1 = [2, 1, 0], k_2 = [1, 1, 2], k_3 = [0, 1, 1].
KernelExample first_example() { return {"000 L93-L97", {1, 2, 1}, {{2, 1, 0}, {1, 1, 2}, {0, 1, 1}}}; }
// 000 L99: q = [2, -1, 3]; k_1 = [1, 2, -1], k_2 = [-2, 1, 3], k_3 = [0, -1, 2] (negative entries).
KernelExample second_example() { return {"000 L99", {2, -1, 3}, {{1, 2, -1}, {-2, 1, 3}, {0, -1, 2}}}; }

// The example as attention inputs [1, n, d]: one head; row 0 of q, the keys as k (v unused: one-hot).
struct ExampleTensors {
  Tensor3 q, k, v;
};
ExampleTensors as_tensors(const KernelExample& ex) {
  const std::size_t n = ex.keys.size(), d = ex.q.size();
  ExampleTensors t{Tensor3::from_shape({1, 1, d}), Tensor3::from_shape({1, n, d}), xt::zeros<float>({std::size_t{1}, n, n})};
  for (std::size_t c = 0; c < d; ++c) t.q(0, 0, c) = static_cast<float>(ex.q[c]);
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t c = 0; c < d; ++c) t.k(0, j, c) = static_cast<float>(ex.keys[j][c]);
    t.v(0, j, j) = 1.0f;  // value j = e_j: the output is the weight vector itself
  }
  return t;
}

// The softmax weights of the example (scale 1): p_j = e^{q.k_j} / sum_l e^{q.k_l}.
std::vector<double> softmax_weights(const KernelExample& ex) {
  std::vector<double> s;
  for (const auto& k : ex.keys) s.push_back(std::inner_product(ex.q.begin(), ex.q.end(), k.begin(), 0.0));
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (double& x : s) sum += x = std::exp(x - m);
  for (double& x : s) x /= sum;
  return s;
}

// The weights of the ReLU kernel, from the reference's normalised linear attention (value j = e_j),
// times the normaliser to give the unnormalised scores relu(q) . relu(k_j).
std::vector<double> relu_kernel_scores(const KernelExample& ex, bool normalized) {
  const ExampleTensors t = as_tensors(ex);
  LinearAttentionConfig cfg;
  cfg.feature_map = FeatureMap::relu;
  cfg.normalize = normalized;
  const Tensor3 o = reference_backend(backends()).linear_attention(t.q, t.k, t.v, cfg);
  std::vector<double> w;
  for (std::size_t j = 0; j < ex.keys.size(); ++j) w.push_back(o(0, 0, j));
  return w;
}

// "k2 > k1 > k3": the keys in decreasing order of their weight (ties keep the key order).
std::string ranking(const std::vector<double>& w) {
  std::vector<std::size_t> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return w[a] > w[b]; });
  std::string out;
  for (std::size_t i = 0; i < order.size(); ++i) out += (i ? " > k" : "k") + std::to_string(order[i] + 1);
  return out;
}

std::string list(const std::vector<double>& w, int decimals) {
  std::string out;
  for (std::size_t j = 0; j < w.size(); ++j) out += (j ? ", " : "") + fixed(w[j], decimals);
  return out;
}

std::vector<DocumentCheck> document_checks() {
  const KernelExample first = first_example(), second = second_example();
  const std::vector<double> p1 = softmax_weights(first), r1 = relu_kernel_scores(first, false);
  const std::vector<double> p2 = softmax_weights(second), r2 = relu_kernel_scores(second, false);
  std::vector<DocumentCheck> checks;
  // 000 L97: "scores about 0.090, 0.665, 0.245 (k1, k2, k3), ranking k2 > k3 > k1": the weights are
  // those of k3, k2, k1; q.k = 4, 5, 3 gives k1 0.245, k3 0.090.
  checks.push_back(check_number(first.source, "softmax weight of k1 (q.k = 4, 5, 3)", "0.090", 0.090, 0.0005, p1[0],
                                fixed(p1[0], 4)));
  checks.push_back(check_number(first.source, "softmax weight of k2", "0.665", 0.665, 0.0005, p1[1], fixed(p1[1], 4)));
  checks.push_back(check_number(first.source, "softmax weight of k3", "0.245", 0.245, 0.0005, p1[2], fixed(p1[2], 4)));
  checks.push_back({first.source, "softmax ranking", "k2 > k3 > k1", ranking(p1), ranking(p1) == "k2 > k3 > k1"});
  checks.push_back({first.source, "ReLU kernel scores relu(q).relu(k_j), unnormalised", "4, 5, 3", list(r1, 0),
                    list(r1, 0) == "4, 5, 3"});
  checks.push_back({first.source, "ReLU kernel ranking, \"the same as softmax's\"", "the same ranking", ranking(r1),
                    ranking(r1) == ranking(p1)});
  checks.push_back({second.source, "softmax ranking (q.k = -3, 4, 7)", "k3 > k2 > k1", ranking(p2),
                    ranking(p2) == "k3 > k2 > k1"});
  checks.push_back({second.source, "ReLU kernel ranking (scores 2, 9, 6)", "k2 > k3 > k1", ranking(r2),
                    ranking(r2) == "k2 > k3 > k1"});
  return checks;
}

// ---- A run: the chapter's functions on seeded inputs ----

struct Inputs {
  Tensor3 q, k, v;
  Tensor2 beta;                // [h, n], Gated DeltaNet's writing strengths in (0, 1)
  DeltaRuleGate gate;          // its scalar log gates, below 0
  PerformerFeatures features;  // the Performer's random features W [m, d]
};
Inputs make_inputs(const Options& o, std::uint64_t seed) {
  Rng rng(seed);
  const auto h = static_cast<std::size_t>(o.heads), n = static_cast<std::size_t>(o.seq), d = static_cast<std::size_t>(o.dim);
  Inputs in{rng.normal_tensor(h, n, d), rng.normal_tensor(h, n, d), rng.normal_tensor(h, n, d),
            Tensor2::from_shape({h, n}), {}};
  in.gate.scalar = Tensor2::from_shape({h, n});
  // beta = sigmoid(N(0, 1)) and g = log sigmoid(N(0, 1) + 3): the forms the papers' projections give
  for (std::size_t i = 0; i < h * n; ++i) {
    in.beta.data()[i] = static_cast<float>(1.0 / (1.0 + std::exp(-rng.normal())));
    in.gate.scalar.data()[i] = static_cast<float>(-std::log1p(std::exp(-(rng.normal() + 3.0))));
  }
  // m orthogonal features from the run's seed, shared by every backend (drawn by the reference)
  in.features = ref::draw_performer_features(static_cast<std::size_t>(o.performer_features), d,
                                             RandomFeatureKind::orthogonal, RowNorms::chi, seed);
  return in;
}

// Gated DeltaNet's configuration for a run: the delta rule, q and k L2-normalised (fla's default).
DeltaRuleConfig gated_deltanet() {
  DeltaRuleConfig cfg;
  cfg.l2_normalize_qk = true;
  return cfg;
}

// Every output a backend gives: the non-causal form, the three causal ones, Gated DeltaNet two ways,
// the Performer non-causal and causal. The outputs are weighted averages of N(0, 1) values through
// float sums of at most n m products: 1e-5 of their largest magnitude, at least 1e-5 (the
// comparison takes the reference's). The identity map, normalised, weighs with both signs: a
// normaliser that nearly cancels magnifies an output and its float error alike.
//
// The Performer's outputs carry, besides, the float error of its exponents
// e_r = omega_r^T x^ - |x^|^2/2 (x^ = d^{-1/4} x): about eps E for a sum of terms no larger than
// E = max_r |omega_r| max |x^| + max |x^|^2 / 2 (Cauchy-Schwarz), once in the exponent and once in the
// shift that stabilises it, so each feature is within delta = 2 eps E (relative); a product of two
// features within 2 delta, and a weighted average of the v_j, whose weights are those products,
// moves by twice that times max |v|: 8 eps E max |v| more.
double performer_slack(const Inputs& in) {
  const std::size_t d = in.q.shape()[2];
  const double scale = std::pow(static_cast<double>(d), -0.25);
  double largest_x = 0.0, largest_w = 0.0;
  for (const Tensor3* x : {&in.q, &in.k})
    for (std::size_t row = 0; row < x->size() / d; ++row) {
      double squared = 0.0;
      for (std::size_t c = 0; c < d; ++c) {
        const double x_c = scale * x->data()[row * d + c];
        squared += x_c * x_c;
      }
      largest_x = std::max(largest_x, std::sqrt(squared));
    }
  for (std::size_t r = 0; r < in.features.num_features(); ++r)
    largest_w = std::max(largest_w, std::sqrt(xt::sum(xt::square(xt::row(in.features.w, r)))()));
  const double e = largest_w * largest_x + 0.5 * largest_x * largest_x;
  return 8.0 * FLT_EPSILON * e * static_cast<double>(xt::amax(xt::abs(in.v))());
}

std::optional<Run> run_one(const linear::Backend& b, const Inputs& in, const LinearAttentionConfig& cfg,
                           std::size_t chunk) {
  Run run;
  const std::size_t h = in.q.shape()[0], m = in.q.shape()[2], d_v = in.v.shape()[2];
  auto add = [&run](const char* name, const Tensor3& out, double slack = 0.0) {
    run.outputs.push_back({name, out, 1e-5 * std::max(1.0, static_cast<double>(xt::amax(xt::abs(out))())) + slack});
  };
  if (b.linear_attention) add("linear_attention", b.linear_attention(in.q, in.k, in.v, cfg));
  if (b.causal_parallel) add("causal_parallel", b.causal_parallel(in.q, in.k, in.v, cfg));
  if (b.causal_recurrent) {
    LinearAttentionState state(h, m, d_v);
    add("causal_recurrent", b.causal_recurrent(in.q, in.k, in.v, cfg, state));
  }
  if (b.causal_chunked) {
    LinearAttentionState state(h, m, d_v);
    add("causal_chunked", b.causal_chunked(in.q, in.k, in.v, cfg, chunk, state));
  }
  // Gated DeltaNet, token by token and in chunks
  const Tensor3 no_state = Tensor3::from_shape({0, 0, 0});
  if (b.delta_recurrent)
    add("gated_deltanet_recurrent", b.delta_recurrent(in.q, in.k, in.v, in.beta, in.gate, gated_deltanet(), no_state).o);
  if (b.delta_chunked)
    add("gated_deltanet_chunked", b.delta_chunked(in.q, in.k, in.v, in.beta, in.gate, gated_deltanet(), chunk, no_state).o);
  // The Performer (FAVOR+) over the run's random features: every key, then the keys up to each query
  if (b.performer) {
    add("performer", b.performer(in.q, in.k, in.v, in.features, false), performer_slack(in));
    add("performer_causal", b.performer(in.q, in.k, in.v, in.features, true), performer_slack(in));
  }
  if (run.outputs.empty()) return std::nullopt;
  return run;
}

std::vector<Agreement> agreements(bool include_cuda) {
  Options o;
  const Inputs in = make_inputs(o, 7);
  const LinearAttentionConfig cfg;
  const Run expected = *run_one(reference_backend(backends()), in, cfg, static_cast<std::size_t>(o.chunk));
  std::vector<Agreement> out;
  const std::string example = "h 2, n 12, d 8, elu+1, chunks of 5";
  for (const auto& b : backends()) {
    if (b.kind == BackendKind::reference || b.kind == BackendKind::student) continue;
    if (b.kind == BackendKind::cuda && !include_cuda) continue;  // results.md must not depend on the machine
    if (unavailable_reason(b.caps)) {
      out.push_back({"linear_attention", b.name, example, 0.0, 0.0, true});
      continue;
    }
    const auto run = run_one(b, in, cfg, static_cast<std::size_t>(o.chunk));
    if (run) for (const Agreement& a : agreements_of(b.name, example, *run, expected)) out.push_back(a);
  }
  return out;
}

// The low-rank dilemma, measured: n = 64 queries and keys of N(0, 1) entries, softmax against
// elu+1 linear attention on the same inputs.
std::string low_rank_markdown() {
  std::ostringstream md;
  md << "| d | rank, softmax | rank, linear (elu+1) | softmax's sigma_(d+1) / sigma_1 | row entropy, softmax | row entropy, linear |\n"
     << "| --- | --- | --- | --- | --- | --- |\n";
  for (const std::size_t d : {std::size_t{4}, std::size_t{8}, std::size_t{16}}) {
    const analysis::LowRankReport r = analysis::low_rank_dilemma(64, d, FeatureMap::elu_plus_one, 606);
    const auto& sigma = r.softmax.singular_values;
    md << "| " << d << " | " << r.softmax.rank << " | " << r.linear.rank << " | " << fixed(sigma[d] / sigma[0], 4)
       << " | " << fixed(r.softmax.mean_row_entropy, 3) << " | " << fixed(r.linear.mean_row_entropy, 3) << " |\n";
  }
  md << "\n(n = 64, one head, seed 606; ranks at 1e-10 of the largest singular value; entropies in nats, "
     << "ln 64 = " << fixed(std::log(64.0), 3) << " for uniform rows.)\n";
  return md.str();
}

// The state against the KV cache: Llama 3 8B as it is, and with every attention layer linear.
std::string memory_markdown() {
  const ModelConfig& model = named_model_config("llama-3-8b");
  std::ostringstream md;
  md << "| context | KV cache, softmax (GQA, g = 8) | linear state (32 heads of 128 x 128) | cache / state |\n"
     << "| --- | --- | --- | --- |\n";
  for (const auto& r : analysis::state_against_kv_cache(model, {256, 4096, 32768, 131072, 1048576}, analysis::DType::bf16))
    md << "| " << r.context << " | " << fixed(r.kv_cache_bytes / 1e6, 1) << " MB | " << fixed(r.state_bytes / 1e6, 1)
       << " MB | " << fixed(r.kv_cache_bytes / r.state_bytes, 1) << " |\n";
  md << "\n(llama-3-8b: 32 layers, bf16, one sequence; the two meet at h d_h / (2 g) = "
     << fixed(analysis::break_even_context(model), 0) << " tokens.)\n";
  return md.str();
}

// Performer against exact softmax attention (scale 1/sqrt(d), in double), one head, n = 32,
// d = 16, q and k of standard deviation 0.5, v of 1: the mean over 8 feature seeds of the largest
// |error| of the outputs, for iid and orthogonal features (chi lengths).
std::string performer_markdown() {
  const std::size_t n = 32, d = 16;
  Rng rng(606);
  const Tensor3 q = rng.normal_tensor(1, n, d, 0.0, 0.5), k = rng.normal_tensor(1, n, d, 0.0, 0.5);
  const Tensor3 v = rng.normal_tensor(1, n, d);
  // o_i = sum_j softmax_j(q_i . k_j / sqrt(d)) v_j
  DTensor2 exact = xt::zeros<double>({n, d});
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> s(n);
    double sum = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t c = 0; c < d; ++c) s[j] += static_cast<double>(q(0, i, c)) * k(0, j, c) / std::sqrt(static_cast<double>(d));
      sum += s[j] = std::exp(s[j]);
    }
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t e = 0; e < d; ++e) exact(i, e) += s[j] / sum * v(0, j, e);
  }
  std::ostringstream md;
  md << "| features m | mean max error, iid | mean max error, orthogonal |\n| --- | --- | --- |\n";
  for (const std::size_t m : {std::size_t{16}, std::size_t{64}, std::size_t{256}, std::size_t{1024}}) {
    md << "| " << m;
    for (const RandomFeatureKind kind : {RandomFeatureKind::iid, RandomFeatureKind::orthogonal}) {
      double total = 0.0;
      for (std::uint64_t seed = 1; seed <= 8; ++seed) {
        const Tensor3 o = ref::performer_attention(q, k, v, ref::draw_performer_features(m, d, kind, RowNorms::chi, seed), false);
        double worst = 0.0;
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t e = 0; e < d; ++e) worst = std::max(worst, std::fabs(o(0, i, e) - exact(i, e)));
        total += worst;
      }
      md << " | " << fixed(total / 8.0, 4);
    }
    md << " |\n";
  }
  md << "\n(one head, n = 32, d = 16, q and k ~ N(0, 0.25), v ~ N(0, 1); the mean over 8 seeds of "
     << "max |o - softmax attention|.)\n";
  return md.str();
}

std::string markdown() {
  std::ostringstream md;
  md << results_header(TVLAB_CHAPTER_NAME, "Linear attention");
  md << "## The documents' numbers\n\n" << checks_markdown(document_checks()) << '\n';
  md << "## The low-rank dilemma\n\n" << low_rank_markdown() << '\n';
  md << "## The state against the KV cache\n\n" << memory_markdown() << '\n';
  md << "## Performer against softmax attention\n\n" << performer_markdown() << '\n';
  md << "## Reference vs optimized\n\n" << agreements_markdown(agreements(/*include_cuda=*/false));
  return md.str();
}

// The documents' two examples, step by step: scores, softmax weights, the ReLU kernel, rankings.
int step_through() {
  int step = 1;
  for (const KernelExample& ex : {first_example(), second_example()}) {
    std::vector<double> s;
    for (const auto& k : ex.keys) s.push_back(std::inner_product(ex.q.begin(), ex.q.end(), k.begin(), 0.0));
    print_step(std::cout, step++, std::string("the documents' example (") + ex.source + "): q = [" + list(ex.q, 0) +
                                      "], three keys, scale 1; the scores q . k_j = " + list(s, 0));
    const std::vector<double> p = softmax_weights(ex);
    print_step(std::cout, step++, "softmax: p_j = e^{q.k_j} / sum_l e^{q.k_l} = " + list(p, 4) + ", ranking " + ranking(p));
    const std::vector<double> r = relu_kernel_scores(ex, false), w = relu_kernel_scores(ex, true);
    print_step(std::cout, step++, "the ReLU kernel phi(x) = max(0, x): phi(q) . phi(k_j) = " + list(r, 0) +
                                      "; normalised, " + list(w, 4) + ", ranking " + ranking(r) +
                                      (ranking(r) == ranking(p) ? " (the same)" : " (not softmax's: ReLU dropped the negative coordinates)"));
  }
  return step;
}

// The delta rule against linear attention: key k = e_1 written twice, v1 = [1, 0] then v2 = [0, 1],
// beta = 1, no gate, then read with q = k (scale 1).
void step_through_delta_rule(int step) {
  const Tensor3 k = {{{1.0f, 0.0f}, {1.0f, 0.0f}}}, v = {{{1.0f, 0.0f}, {0.0f, 1.0f}}};
  const Tensor2 beta = {{1.0f, 1.0f}};
  const auto& ref = reference_backend(backends());
  DeltaRuleConfig cfg;
  cfg.scale = 1.0;
  const Tensor3 delta = ref.delta_recurrent(k, k, v, beta, {}, cfg, Tensor3::from_shape({0, 0, 0})).o;
  cfg.delta = false;
  const Tensor3 plain = ref.delta_recurrent(k, k, v, beta, {}, cfg, Tensor3::from_shape({0, 0, 0})).o;
  print_step(std::cout, step++, "write v1 = [1, 0], then v2 = [0, 1], both under the key k = [1, 0], beta = 1; read with q = k");
  print_step(std::cout, step++, "linear attention (S += k v^T) reads v1 + v2 = [" + fixed(plain(0, 1, 0), 0) + ", " +
                                    fixed(plain(0, 1, 1), 0) + "]: writes only add");
  print_step(std::cout, step, "the delta rule (S += k (v - S^T k)^T) reads v2 = [" + fixed(delta(0, 1, 0), 0) + ", " +
                                  fixed(delta(0, 1, 1), 0) + "]: the second write replaced the first");
}

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown();
    return 0;
  }
  require_positive(TVLAB_CHAPTER_NAME, "--seq", o.seq);
  require_positive(TVLAB_CHAPTER_NAME, "--heads", o.heads);
  require_positive(TVLAB_CHAPTER_NAME, "--dim", o.dim);
  require_positive(TVLAB_CHAPTER_NAME, "--chunk", o.chunk);
  require_positive(TVLAB_CHAPTER_NAME, "--performer-features", o.performer_features);
  const auto h = static_cast<std::uint64_t>(o.heads), n = static_cast<std::uint64_t>(o.seq);
  const auto d = static_cast<std::uint64_t>(o.dim), m = static_cast<std::uint64_t>(o.performer_features);
  // What the run will take, before anything is allocated: q, k, v and eight outputs per backend;
  // the Performer's W [m, d] and one head's key features [n, m], in double; the reference's
  // parallel form, n^2 d products per head, and its Performer, per form and position m (2 d) for
  // the exponents of q and k, m (2 kExpCost) for their exponentials, m (2 d) for S and its read.
  RunCost cost;
  cost.memory("q, k, v and every backend's eight outputs", {3 + 8 * backends().size(), h, n, d}, sizeof(float), "--seq")
      .memory("the Performer's features W and one head's key features", {m, d + n}, sizeof(double),
              "--performer-features")
      .work("the reference's masked parallel form", {h, n, n, d}, "--seq")
      .work("the reference's Performer, both forms", {2, h, n, m, 4 * d + 2 * kExpCost}, "--performer-features");
  cost.require_affordable(g, o);
  const Inputs in = make_inputs(o, g.seed);
  LinearAttentionConfig cfg;
  cfg.feature_map = parse_feature_map(o.feature_map);
  const auto chunk = static_cast<std::size_t>(o.chunk);
  const auto one = [&](const linear::Backend& b) { return run_one(b, in, cfg, chunk); };
  // The reference first: it validates the inputs, so --step never prints an invalid case.
  const Run expected = *one(reference_backend(backends()));
  if (o.step) step_through_delta_rule(step_through());
  Dump dump(o.dump);
  dump.write("q", in.q);
  dump.write("k", in.k);
  dump.write("v", in.v);
  dump.write_double("performer_features_w", in.features.w);
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         "linear attention: heads " + std::to_string(o.heads) + ", seq " + std::to_string(o.seq) +
                             ", dim " + std::to_string(o.dim) + ", chunk " + std::to_string(o.chunk) + ", " +
                             o.feature_map + ", Performer features " + std::to_string(o.performer_features) +
                             ", seed " + std::to_string(g.seed),
                         {{"heads", o.heads}, {"seq", o.seq}, {"dim", o.dim}, {"chunk", o.chunk},
                          {"feature_map", o.feature_map}, {"performer_features", o.performer_features}},
                         g.format == "json"};
  return run_backends(backends(), o.backend, one, expected, dump, report);
}

}  // namespace

// The build names this function after the chapter's folder (chapter_NN_<topic>) and lists it in `tvlab`.
Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "linear";
  c.summary = "linear attention: the kernel trick, causal recurrent / parallel / chunked forms, the delta rule, the Performer";
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(
        root, global, TVLAB_CHAPTER_NAME, "linear",
        "Linear attention: phi(Q)(phi(K)^T V), and causal linear attention three ways", *o,
        "walk the documents' example (softmax against the ReLU kernel, the rankings), then the delta rule's overwrite",
        "write q.npy, k.npy, v.npy, performer_features_w.npy and <output>_<backend>.npy to DIR", backend_lines(backends()),
        [o, &global] { return run(*o, global); });
    sub.option("--seq", o->seq, "positions n");
    sub.option("--heads", o->heads, "heads h");
    sub.option("--dim", o->dim, "width d of q, k and v");
    sub.option("--chunk", o->chunk, "chunk size C of the chunked causal form");
    sub.choice("--feature-map", o->feature_map, {"elu_plus_one", "relu", "identity"}, "the feature map phi");
    sub.option("--performer-features", o->performer_features,
               "random features m of the Performer (orthogonal, drawn from --seed)");
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(/*include_cuda=*/true), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli

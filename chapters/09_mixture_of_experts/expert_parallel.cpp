#include "expert_parallel.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <sstream>

#include "tvlab/core/error.hpp"
#include "tvlab/opt/moe.hpp"

namespace tvlab::mpi {
namespace {

// MPI counts and displacements are int.
int as_count(const char* fn, std::size_t n, const char* what) {
  require(n <= static_cast<std::size_t>(INT_MAX), fn, what, " (", n, ") is beyond MPI's int counts: use fewer tokens per rank");
  return static_cast<int>(n);
}

// Exclusive prefix sums: where each rank's block starts in a buffer of blocks.
std::vector<std::size_t> starts_of(const std::vector<std::size_t>& sizes) {
  std::vector<std::size_t> start(sizes.size() + 1, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i) start[i + 1] = start[i] + sizes[i];
  return start;
}

// MPI_Alltoallv of blocks of `unit` elements of `type`: block d of `send` (sizes[d] units) goes to
// rank d; block s of `recv` comes from rank s.
void exchange(const char* fn, MPI_Comm comm, const void* send, const std::vector<std::size_t>& send_units, void* recv,
              const std::vector<std::size_t>& recv_units, std::size_t unit, MPI_Datatype type) {
  const std::size_t ranks = send_units.size();
  std::vector<int> send_count(ranks), send_at(ranks), recv_count(ranks), recv_at(ranks);
  const std::vector<std::size_t> send_start = starts_of(send_units), recv_start = starts_of(recv_units);
  for (std::size_t d = 0; d < ranks; ++d) {
    send_count[d] = as_count(fn, send_units[d] * unit, "a block");
    send_at[d] = as_count(fn, send_start[d] * unit, "an offset");
    recv_count[d] = as_count(fn, recv_units[d] * unit, "a block");
    recv_at[d] = as_count(fn, recv_start[d] * unit, "an offset");
  }
  MPI_Alltoallv(send, send_count.data(), send_at.data(), type, recv, recv_count.data(), recv_at.data(), type, comm);
}

std::string list(const std::vector<std::size_t>& v) {
  std::ostringstream out;
  for (std::size_t i = 0; i < v.size(); ++i) out << (i ? " " : "") << v[i];
  return out.str();
}

}  // namespace

std::size_t owner_rank(std::size_t expert, std::size_t num_experts, std::size_t ranks) {
  return expert / (num_experts / ranks);
}

void validate_expert_parallel(const char* fn, const ExpertParallelConfig& cfg, std::size_t ranks) {
  ref::validate_router(fn, cfg.router);
  const std::size_t num_experts = cfg.router.num_experts;
  require(ranks >= 1 && num_experts % ranks == 0, fn, "ranks (", ranks, ") must divide num_experts (", num_experts,
          "): each rank holds E / R whole experts");
  const std::size_t m = cfg.max_ranks;
  if (m == 0) return;  // no device limit
  require(m <= ranks, fn, "max_ranks (", m, ") must be 0 (no limit) or in 1..ranks (", ranks, ")");
  require(cfg.router.top_k <= m * (num_experts / ranks), fn, "top_k (", cfg.router.top_k, ") is more than the ",
          m * (num_experts / ranks), " experts of max_ranks (", m, ") ranks");
  require(cfg.router.n_group == 1, fn, "n_group (", cfg.router.n_group,
          ") must be 1 with max_ranks: the ranks are the groups of device-limited routing");
}

ExpertShard shard_of(const MoeWeights& w, std::size_t rank, std::size_t ranks) {
  const char* fn = "shard_of";
  require(!w.experts.empty(), fn, "w.experts is empty: an MoE layer needs at least one routed expert");
  const std::size_t num_experts = w.experts.size(), d_model = w.router.shape()[0];
  require(ranks >= 1 && num_experts % ranks == 0, fn, "ranks (", ranks, ") must divide num_experts (", num_experts, ")");
  require(rank < ranks, fn, "rank (", rank, ") must be below ranks (", ranks, ")");
  require_dim(fn, "w.router", w.router, 1, "columns", num_experts, "one per expert");
  const std::size_t per_rank = num_experts / ranks, first = rank * per_rank;
  ExpertShard s;
  s.router = w.router;
  s.first_expert = first;
  s.local.router = Tensor2::from_shape({d_model, per_rank});
  for (std::size_t i = 0; i < d_model; ++i)
    for (std::size_t j = 0; j < per_rank; ++j) s.local.router(i, j) = w.router(i, first + j);
  s.local.experts.assign(w.experts.begin() + static_cast<std::ptrdiff_t>(first),
                         w.experts.begin() + static_cast<std::ptrdiff_t>(first + per_rank));
  s.shared = w.shared;
  return s;
}

Routing route_device_limited(const Tensor2& logits, const ExpertParallelConfig& cfg, std::size_t ranks,
                             const std::vector<float>& bias) {
  const char* fn = "route_device_limited";
  validate_expert_parallel(fn, cfg, ranks);
  const ref::RouterConfig& rc = cfg.router;
  const std::size_t num_experts = rc.num_experts, per_rank = num_experts / ranks;
  const std::size_t m = cfg.max_ranks == 0 ? ranks : cfg.max_ranks;
  require(logits.dimension() == 2 && logits.shape()[1] == num_experts, fn, "logits must have num_experts (", num_experts,
          ") columns");
  require(bias.empty() || bias.size() == num_experts, fn, "bias has ", bias.size(), " values, expected num_experts (",
          num_experts, ") or none");
  const Tensor2 s = ref::router_scores(logits, rc);  // checks the logits
  const std::size_t tokens = logits.shape()[0];
  Routing r;
  r.tokens = tokens;
  r.num_experts = num_experts;
  Tensor2 row = Tensor2::from_shape({1, num_experts});
  for (std::size_t t = 0; t < tokens; ++t) {
    // a rank's score: its best selection score max_{i in rank} (s_i + b_i); keep the M best ranks
    std::vector<double> rank_score(ranks, -HUGE_VAL);
    for (std::size_t e = 0; e < num_experts; ++e) {
      const double choice = static_cast<double>(s(t, e)) + (bias.empty() ? 0.0 : bias[e]);
      rank_score[e / per_rank] = std::max(rank_score[e / per_rank], choice);
    }
    std::vector<std::size_t> order(ranks);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rank_score[a] > rank_score[b]; });
    // the other ranks' experts get a selection bias no score reaches (scores lie in [0, 1], plus
    // the bias): route_top_k then picks its k among the M ranks' experts, with the same gates
    std::vector<float> limited = bias.empty() ? std::vector<float>(num_experts, 0.0f) : bias;
    for (std::size_t j = m; j < ranks; ++j)
      for (std::size_t e = order[j] * per_rank; e < (order[j] + 1) * per_rank; ++e) limited[e] = -1e30f;
    for (std::size_t e = 0; e < num_experts; ++e) row(0, e) = logits(t, e);
    const Routing one = ref::route_top_k(row, rc, limited);
    for (std::size_t a = 0; a < one.size(); ++a) {
      r.token.push_back(t);
      r.expert.push_back(one.expert[a]);
      r.gate.push_back(one.gate[a]);
    }
  }
  return r;
}

Tensor2 expert_parallel_layer(MPI_Comm comm, const Tensor2& x, const ExpertShard& shard, const ExpertParallelConfig& cfg,
                              const std::vector<float>& bias, ExchangeStats* stats, std::vector<std::string>* steps) {
  const char* fn = "expert_parallel_layer";
  int rank_int = 0, ranks_int = 1;
  MPI_Comm_rank(comm, &rank_int);
  MPI_Comm_size(comm, &ranks_int);
  const std::size_t rank = static_cast<std::size_t>(rank_int), ranks = static_cast<std::size_t>(ranks_int);
  validate_expert_parallel(fn, cfg, ranks);
  const std::size_t num_experts = cfg.router.num_experts, per_rank = num_experts / ranks;
  require_nonempty(fn, "x", x);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  require_dim(fn, "shard.router", shard.router, 0, "rows", d_model, "x's d_model");
  require_dim(fn, "shard.router", shard.router, 1, "columns", num_experts, "cfg.router.num_experts");
  require(shard.local.experts.size() == per_rank && shard.first_expert == rank * per_rank, fn, "shard holds experts ",
          shard.first_expert, "..", shard.first_expert + shard.local.experts.size(), ", expected this rank's ", rank * per_rank,
          "..", (rank + 1) * per_rank, " (shard_of(w, rank, ranks))");
  require(shard.local.shared.empty(), fn, "shard.local.shared must be empty: the shared experts are shard.shared");
  require_finite(fn, "x", x);

  // 1. route: logits x W_g by one SGEMM (every rank has the whole router), then top-k
  Tensor2 logits = Tensor2::from_shape({tokens, num_experts});
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_count(fn, tokens, "tokens"), static_cast<int>(num_experts),
              static_cast<int>(d_model), 1.0f, x.data(), static_cast<int>(d_model), shard.router.data(),
              static_cast<int>(num_experts), 0.0f, logits.data(), static_cast<int>(num_experts));
  const Routing r =
      cfg.max_ranks > 0 ? route_device_limited(logits, cfg, ranks, bias) : ref::route_top_k(logits, cfg.router, bias);

  // 2. the dispatch plan: one row per (token, rank) pair, in token order within each rank's block;
  // `pairs[pair_first[t]..pair_first[t + 1]]` are token t's (rank, row) in the order of its
  // first assignment on each rank
  std::vector<std::vector<std::size_t>> row_token(ranks);
  std::vector<std::vector<AssignmentMessage>> to(ranks);
  std::vector<std::size_t> pair_first(tokens + 1, 0);
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  {
    std::vector<std::size_t> first(tokens + 1, 0), by_token(r.size());  // the assignments by token, stable
    for (std::size_t t : r.token) ++first[t + 1];
    for (std::size_t t = 0; t < tokens; ++t) first[t + 1] += first[t];
    std::vector<std::size_t> next(first.begin(), first.end() - 1);
    for (std::size_t a = 0; a < r.size(); ++a) by_token[next[r.token[a]]++] = a;
    for (std::size_t t = 0; t < tokens; ++t) {
      pair_first[t] = pairs.size();
      for (std::size_t i = first[t]; i < first[t + 1]; ++i) {
        const std::size_t a = by_token[i], d = owner_rank(r.expert[a], num_experts, ranks);
        auto p = std::find_if(pairs.begin() + static_cast<std::ptrdiff_t>(pair_first[t]), pairs.end(),
                              [&](const auto& q) { return q.first == d; });
        if (p == pairs.end()) {
          pairs.emplace_back(d, row_token[d].size());
          row_token[d].push_back(t);
          p = pairs.end() - 1;
        }
        to[d].push_back({static_cast<std::int32_t>(p->second), static_cast<std::int32_t>(r.expert[a] - d * per_rank), r.gate[a]});
      }
    }
    pair_first[tokens] = pairs.size();
  }
  std::vector<std::size_t> rows_to(ranks), asg_to(ranks);
  for (std::size_t d = 0; d < ranks; ++d) {
    rows_to[d] = row_token[d].size();
    asg_to[d] = to[d].size();
  }

  // the counts first (MPI_Alltoall): each rank learns how much it will receive from each
  std::vector<std::uint64_t> send_counts(2 * ranks), recv_counts(2 * ranks);
  for (std::size_t d = 0; d < ranks; ++d) {
    send_counts[2 * d] = rows_to[d];
    send_counts[2 * d + 1] = asg_to[d];
  }
  double clock = MPI_Wtime(), exchange_seconds = 0.0;
  MPI_Alltoall(send_counts.data(), 2, MPI_UINT64_T, recv_counts.data(), 2, MPI_UINT64_T, comm);
  std::vector<std::size_t> rows_from(ranks), asg_from(ranks);
  for (std::size_t s = 0; s < ranks; ++s) {
    rows_from[s] = static_cast<std::size_t>(recv_counts[2 * s]);
    asg_from[s] = static_cast<std::size_t>(recv_counts[2 * s + 1]);
  }
  const std::vector<std::size_t> send_row_start = starts_of(rows_to), recv_row_start = starts_of(rows_from);
  const std::size_t rows_out = send_row_start[ranks], rows_in = recv_row_start[ranks];

  // then the rows and the assignments (MPI_Alltoallv)
  std::vector<float> send_rows(rows_out * d_model);
  std::vector<AssignmentMessage> send_asg;
  for (std::size_t d = 0; d < ranks; ++d) {
    for (std::size_t j = 0; j < rows_to[d]; ++j)
      std::copy_n(&x(row_token[d][j], 0), d_model, send_rows.data() + (send_row_start[d] + j) * d_model);
    send_asg.insert(send_asg.end(), to[d].begin(), to[d].end());
  }
  Tensor2 x_in = Tensor2::from_shape({rows_in, d_model});
  std::vector<AssignmentMessage> recv_asg(starts_of(asg_from)[ranks]);
  exchange(fn, comm, send_rows.data(), rows_to, x_in.data(), rows_from, d_model, MPI_FLOAT);
  exchange(fn, comm, send_asg.data(), asg_to, recv_asg.data(), asg_from, sizeof(AssignmentMessage), MPI_BYTE);
  exchange_seconds += MPI_Wtime() - clock;

  // 3. the local experts on the received rows: a routing over them (row = token) with the
  // senders' gates, so that opt::moe_experts returns each row's sum_a g_a Expert_{e_a}(row)
  Routing local;
  local.tokens = rows_in;
  local.num_experts = per_rank;
  {
    std::size_t a = 0;
    for (std::size_t s = 0; s < ranks; ++s)
      for (std::size_t i = 0; i < asg_from[s]; ++i, ++a) {
        local.token.push_back(recv_row_start[s] + static_cast<std::size_t>(recv_asg[a].row));
        local.expert.push_back(static_cast<std::size_t>(recv_asg[a].local_expert));
        local.gate.push_back(recv_asg[a].gate);
      }
  }
  clock = MPI_Wtime();
  Tensor2 y_in = rows_in > 0 ? opt::moe_experts(x_in, shard.local, local) : Tensor2::from_shape({0, d_model});
  const double expert_seconds = MPI_Wtime() - clock;

  // 4. combine: the partial sums go back in the order they came; each token adds its own
  std::vector<float> back(rows_out * d_model);
  clock = MPI_Wtime();
  exchange(fn, comm, y_in.data(), rows_from, back.data(), rows_to, d_model, MPI_FLOAT);
  exchange_seconds += MPI_Wtime() - clock;
  Tensor2 y = xt::zeros<float>({tokens, d_model});
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t p = pair_first[t]; p < pair_first[t + 1]; ++p) {
      const float* part = back.data() + (send_row_start[pairs[p].first] + pairs[p].second) * d_model;
      for (std::size_t c = 0; c < d_model; ++c) y(t, c) += part[c];
    }
  // the shared experts: every token, gate 1, on its own rank (no exchange)
  if (!shard.shared.empty()) {
    MoeWeights shared_layer;
    shared_layer.router = xt::zeros<float>({d_model, shard.shared.size()});  // unused: the routing is fixed
    shared_layer.experts = shard.shared;
    Routing all;
    all.tokens = tokens;
    all.num_experts = shard.shared.size();
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t s = 0; s < shard.shared.size(); ++s) {
        all.token.push_back(t);
        all.expert.push_back(s);
        all.gate.push_back(1.0f);
      }
    y += opt::moe_experts(x, shared_layer, all);
  }

  if (stats != nullptr) {
    const std::size_t row_bytes = d_model * sizeof(float), asg_bytes = sizeof(AssignmentMessage);
    *stats = ExchangeStats{rows_to, rows_from, asg_to, asg_from, 0, 0, exchange_seconds, expert_seconds};
    for (std::size_t d = 0; d < ranks; ++d) {
      if (d == rank) continue;  // a copy within the rank
      // dispatch: rows and assignments out; combine: the partial sums back
      stats->bytes_sent += rows_to[d] * row_bytes + asg_to[d] * asg_bytes + rows_from[d] * row_bytes;
      stats->bytes_received += rows_from[d] * row_bytes + asg_from[d] * asg_bytes + rows_to[d] * row_bytes;
    }
  }

  if (steps != nullptr) {
    std::ostringstream route, dispatch, experts, combine;
    route << std::fixed << std::setprecision(3) << "rank " << rank << " (experts " << shard.first_expert << ".."
          << shard.first_expert + per_rank - 1 << "), " << tokens << " tokens:\n";
    for (std::size_t t = 0; t < tokens; ++t) {
      route << "  token " << t << " ->";
      for (std::size_t a = 0; a < r.size(); ++a)
        if (r.token[a] == t)
          route << " expert " << r.expert[a] << " (gate " << r.gate[a] << ", rank "
                << owner_rank(r.expert[a], num_experts, ranks) << ")";
      route << "\n";
    }
    route << "  rows to each rank: " << list(rows_to) << "   assignments to each rank: " << list(asg_to) << "\n";
    dispatch << "rank " << rank << " receives:\n";
    std::size_t a = 0;
    for (std::size_t s = 0; s < ranks; ++s) {
      dispatch << "  from rank " << s << ": " << rows_from[s] << " rows, " << asg_from[s] << " assignments";
      for (std::size_t i = 0; i < asg_from[s]; ++i, ++a)
        dispatch << (i ? ", " : " (") << "row " << recv_asg[a].row << " -> expert "
                 << shard.first_expert + static_cast<std::size_t>(recv_asg[a].local_expert);
      dispatch << (asg_from[s] ? ")\n" : "\n");
    }
    const std::vector<std::size_t> load = rows_in > 0 ? expert_load(local) : std::vector<std::size_t>(per_rank, 0);
    experts << "rank " << rank << ": " << rows_in << " rows;";
    for (std::size_t e = 0; e < per_rank; ++e)
      experts << " expert " << shard.first_expert + e << " on " << load[e] << " of them" << (e + 1 < per_rank ? "," : "");
    experts << " -> " << rows_in << " gate-weighted sums of " << d_model << " floats\n";
    combine << "rank " << rank << ": returns " << list(rows_from) << " rows to ranks 0.." << ranks - 1 << ", gets back "
            << list(rows_to) << "; token y = sum of its partial rows:\n";
    for (std::size_t t = 0; t < tokens; ++t) {
      combine << "  token " << t << " =";
      for (std::size_t p = pair_first[t]; p < pair_first[t + 1]; ++p)
        combine << (p > pair_first[t] ? " +" : "") << " rank " << pairs[p].first << "'s row " << pairs[p].second;
      combine << (shard.shared.empty() ? "" : " + shared experts (here)") << "\n";
    }
    steps->assign({route.str(), dispatch.str(), experts.str(), combine.str()});
  }
  return y;
}

void print_in_rank_order(MPI_Comm comm, const std::string& text) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(ranks)), at(static_cast<std::size_t>(ranks) + 1, 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm);
  for (int i = 0; i < ranks; ++i) at[static_cast<std::size_t>(i) + 1] = at[static_cast<std::size_t>(i)] + lengths[static_cast<std::size_t>(i)];
  std::string all(rank == 0 ? static_cast<std::size_t>(at.back()) : 0, '\0');
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), at.data(), MPI_CHAR, 0, comm);
  if (rank == 0) std::cout << all << std::flush;
}

}  // namespace tvlab::mpi

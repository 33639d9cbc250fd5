// moe_mpi: chapter 09's MoE layer with expert parallelism over MPI (expert_parallel.hpp).
//
//   mpirun -np 2 build/default/chapters/moe_mpi --step    the dispatch step by step, a tiny layer
//   mpirun -np 4 build/default/chapters/moe_mpi --check   the distributed layer against opt::moe_layer
//   mpirun -np 4 build/default/chapters/moe_mpi --bench   one layer timed (d_model 1024, d_ff 2816, E 8, k 2)
//
// Every rank has its own batch of tokens (data parallel) and E / R of the experts (expert
// parallel). In --check and --step every rank builds the same global layer and every rank's
// batch from one seed, so it can compute the single-process result for its own batch.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>
#include <utility>

#include "expert_parallel.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/moe.hpp"
#include "tvlab/ref/moe_router.hpp"

using namespace tvlab;

namespace {

struct Options {
  bool check = false, step = false, bench = false;
  std::size_t tokens = 0, d_model = 0, d_ff = 0, experts = 8, top_k = 2, shared = 0, max_ranks = 0, repeat = 3;
  std::uint64_t seed = 1;
};

// Router and experts ~ N(0, 1 / fan_in), as the walkthrough's layers: logits and outputs O(1).
SwigluWeights random_expert(Rng& rng, std::size_t d_model, std::size_t d_ff) {
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(d_model)), ff_scale = 1.0 / std::sqrt(static_cast<double>(d_ff));
  return {rng.normal_matrix(d_model, d_ff, 0.0, in_scale), rng.normal_matrix(d_model, d_ff, 0.0, in_scale),
          rng.normal_matrix(d_ff, d_model, 0.0, ff_scale)};
}

MoeWeights random_layer(Rng& rng, const Options& o) {
  MoeWeights w;
  w.router = rng.normal_matrix(o.d_model, o.experts, 0.0, 1.0 / std::sqrt(static_cast<double>(o.d_model)));
  for (std::size_t e = 0; e < o.experts; ++e) w.experts.push_back(random_expert(rng, o.d_model, o.d_ff));
  for (std::size_t s = 0; s < o.shared; ++s) w.shared.push_back(random_expert(rng, o.d_model, o.d_ff));
  return w;
}

// This rank's batch of tokens: every rank's batch (rows(q) tokens for rank q) drawn in rank order
// from the same generator, so that all ranks agree on all batches and keep their own.
template <class Rows>
Tensor2 own_batch(Rng& rng, std::size_t ranks, std::size_t me, std::size_t d_model, const Rows& rows) {
  Tensor2 x;
  for (std::size_t q = 0; q < ranks; ++q) {
    Tensor2 batch = rng.normal_matrix(rows(q), d_model);
    if (q == me) x = std::move(batch);
  }
  return x;
}

// Rank 0 gets every rank's values, rank order.
std::vector<double> gather(MPI_Comm comm, const std::vector<double>& mine) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  std::vector<double> all(mine.size() * static_cast<std::size_t>(ranks));
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()), MPI_DOUBLE, 0, comm);
  return all;
}

// The largest |a - b| and |b|.
std::pair<double, double> max_diff(const Tensor2& a, const Tensor2& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a.data()[i]) - b.data()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b.data()[i])));
  }
  return {diff, scale};
}

// The most ranks any token's experts span.
std::size_t widest_span(const Routing& r, std::size_t ranks) {
  std::size_t widest = 0;
  std::vector<std::vector<bool>> used(r.tokens, std::vector<bool>(ranks, false));
  for (std::size_t a = 0; a < r.size(); ++a) used[r.token[a]][mpi::owner_rank(r.expert[a], r.num_experts, ranks)] = true;
  for (const auto& u : used) widest = std::max(widest, static_cast<std::size_t>(std::count(u.begin(), u.end(), true)));
  return widest;
}

std::string kib(double bytes) {
  std::ostringstream out;
  if (bytes < 65536)
    out << static_cast<long long>(bytes) << " B";
  else if (bytes < 64.0 * 1048576)
    out << std::fixed << std::setprecision(1) << bytes / 1024.0 << " KiB";
  else
    out << std::fixed << std::setprecision(2) << bytes / 1048576.0 << " MiB";
  return out.str();
}

// The rows/bytes table of one layer, printed by rank 0: per rank, rows to other ranks, bytes out and in.
void print_bytes(MPI_Comm comm, int rank, const mpi::ExchangeStats& st, const std::string& title) {
  double rows_out = 0, rows_local = 0;
  for (std::size_t d = 0; d < st.rows_to.size(); ++d) (static_cast<int>(d) == rank ? rows_local : rows_out) += static_cast<double>(st.rows_to[d]);
  const std::vector<double> all = gather(comm, {rows_local, rows_out, static_cast<double>(st.bytes_sent), static_cast<double>(st.bytes_received)});
  if (rank != 0) return;
  std::cout << std::defaultfloat << title << "\n  rank  rows kept  rows to others  bytes sent   bytes received\n";
  for (std::size_t i = 0; i < all.size() / 4; ++i)
    std::cout << "  " << std::setw(4) << i << std::setw(11) << static_cast<long long>(all[4 * i]) << std::setw(16)
              << static_cast<long long>(all[4 * i + 1]) << std::setw(14)
              << kib(all[4 * i + 2]) << std::setw(15) << kib(all[4 * i + 3]) << "\n";
}

// --check: the distributed layer against the single-process one, unlimited and device-limited.
int run_check(MPI_Comm comm, int rank, int ranks, Options o) {
  const std::size_t R = static_cast<std::size_t>(ranks), me = static_cast<std::size_t>(rank);
  Rng rng(o.seed);
  const MoeWeights w = random_layer(rng, o);
  // uneven sizes on purpose: tokens + 3 rank
  const Tensor2 x = own_batch(rng, R, me, o.d_model, [&](std::size_t q) { return o.tokens + 3 * q; });
  const mpi::ExpertShard shard = mpi::shard_of(w, me, R);
  ref::RouterConfig rc;
  rc.num_experts = o.experts;
  rc.top_k = o.top_k;
  // tolerance: the same products, the float sums in another order (a token's k gated outputs
  // added per rank, then across ranks; other row blocks in the SGEMMs): a few float roundings of
  // the largest output, far below the size of one misplaced expert (about max |y|)
  const double tolerance = 1e-5;
  bool ok = true;
  if (rank == 0)
    std::cout << "moe_mpi --check: " << R << " ranks, E " << o.experts << " (" << o.experts / R << " per rank), k " << o.top_k
              << ", " << o.shared << " shared, d_model " << o.d_model << ", d_ff " << o.d_ff << ", tokens per rank "
              << o.tokens << " + 3 rank; tolerance max |y - y_single| <= " << tolerance << " max |y_single|\n";
  // no limit; each token on one rank (when its k experts fit there); M = R, which limits nothing
  std::vector<std::size_t> limits = {0};
  if (o.top_k <= o.experts / R && R > 1) limits.push_back(1);
  limits.push_back(R);
  for (std::size_t m : limits) {
    mpi::ExpertParallelConfig cfg{rc, m};
    mpi::ExchangeStats st;
    const Tensor2 y = mpi::expert_parallel_layer(comm, x, shard, cfg, {}, &st);
    // the single-process result for this rank's batch: opt::moe_layer, or with the limit the
    // same routing through opt::moe_experts; and the span of each token's experts
    const Tensor2 logits = opt::router_logits(x, w);
    const Routing r = m == 0 ? ref::route_top_k(logits, rc) : mpi::route_device_limited(logits, cfg, R);
    const Tensor2 single = m == 0 ? opt::moe_layer(x, w, rc) : opt::moe_experts(x, w, r);
    const auto [diff, scale] = max_diff(y, single);
    bool mine = diff <= tolerance * scale;
    const std::size_t span = widest_span(r, R);
    if (m > 0) mine = mine && span <= m;
    if (m == R) {  // no limit at all: exactly the plain router's choice
      const Routing plain = ref::route_top_k(logits, rc);
      mine = mine && plain.expert == r.expert && plain.gate == r.gate;
    }
    const std::vector<double> all = gather(comm, {diff, scale, static_cast<double>(span), mine ? 1.0 : 0.0});
    std::ostringstream title;
    title << (m == 0 ? std::string("top-k routing, no limit") : "device-limited routing, max_ranks M = " + std::to_string(m));
    print_bytes(comm, rank, st, title.str());
    if (rank == 0) {
      for (int q = 0; q < ranks; ++q) {
        const double* v = &all[4 * static_cast<std::size_t>(q)];
        std::cout << "  rank " << q << ": max |y - y_single| " << std::scientific << std::setprecision(2) << v[0] << " (max |y| "
                  << std::fixed << std::setprecision(3) << v[1] << "), widest span " << static_cast<int>(v[2]) << " ranks"
                  << (v[3] > 0 ? "" : "  MISMATCH") << "\n";
        ok = ok && v[3] > 0;
      }
    }
  }
  int all_ok = ok ? 1 : 0;
  MPI_Bcast(&all_ok, 1, MPI_INT, 0, comm);
  if (rank == 0) std::cout << (all_ok ? "PASS" : "FAIL") << ": " << R << " ranks agree with the single-process layer\n";
  return all_ok ? 0 : 1;
}

// --step: a tiny layer's dispatch, each step printed by every rank in turn.
int run_step(MPI_Comm comm, int rank, int ranks, Options o) {
  const std::size_t R = static_cast<std::size_t>(ranks), me = static_cast<std::size_t>(rank);
  Rng rng(o.seed);
  const MoeWeights w = random_layer(rng, o);
  const Tensor2 x = own_batch(rng, R, me, o.d_model, [&](std::size_t) { return o.tokens; });
  ref::RouterConfig rc;
  rc.num_experts = o.experts;
  rc.top_k = o.top_k;
  const mpi::ExpertParallelConfig cfg{rc, o.max_ranks};
  mpi::ExchangeStats st;
  std::vector<std::string> steps;
  const Tensor2 y = mpi::expert_parallel_layer(comm, x, mpi::shard_of(w, me, R), cfg, {}, &st, &steps);
  const char* titles[] = {"1. route: each rank's tokens pick k experts; a token goes once to each rank that owns one of them",
                          "2. dispatch (MPI_Alltoall of the counts, MPI_Alltoallv of the rows and their assignments)",
                          "3. experts: each rank runs its experts on the rows it received (opt::moe_experts)",
                          "4. combine (MPI_Alltoallv back): each row's gate-weighted sum returns to its token's rank"};
  if (rank == 0)
    std::cout << "moe_mpi --step: " << R << " ranks, " << o.tokens << " tokens each, E " << o.experts << " (" << o.experts / R
              << " per rank), k " << o.top_k << ", d_model " << o.d_model << ", d_ff " << o.d_ff
              << (o.max_ranks ? ", max_ranks " + std::to_string(o.max_ranks) : std::string()) << "\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (rank == 0) std::cout << "\n" << titles[i] << "\n";
    mpi::print_in_rank_order(comm, steps[i]);
  }
  if (rank == 0) std::cout << "\n";
  print_bytes(comm, rank, st, "bytes per rank (rows of d_model floats, 12 bytes per assignment; the rank's own rows are not sent)");
  const auto [diff, scale] = max_diff(y, opt::moe_layer(x, w, rc));
  const std::vector<double> all = gather(comm, {diff});
  if (rank == 0) {
    std::cout << "max |y - opt::moe_layer(own batch)| per rank:";
    for (double d : all) std::cout << " " << std::scientific << std::setprecision(1) << d;
    std::cout << "\n";
  }
  return 0;
}

// --bench: one layer of the given size, timed; weights of this rank's experts only.
int run_bench(MPI_Comm comm, int rank, int ranks, Options o) {
  const std::size_t R = static_cast<std::size_t>(ranks), me = static_cast<std::size_t>(rank);
  const std::size_t per_rank = o.experts / R, tokens = o.tokens / R;
  // each expert from its own seed, so a rank draws only its own
  Rng router_rng(o.seed);
  mpi::ExpertShard shard;
  shard.router = router_rng.normal_matrix(o.d_model, o.experts, 0.0, 1.0 / std::sqrt(static_cast<double>(o.d_model)));
  shard.first_expert = me * per_rank;
  shard.local.router = Tensor2::from_shape({o.d_model, per_rank});
  for (std::size_t e = 0; e < per_rank; ++e) {
    for (std::size_t i = 0; i < o.d_model; ++i) shard.local.router(i, e) = shard.router(i, shard.first_expert + e);
    Rng rng(o.seed + 1 + shard.first_expert + e);
    shard.local.experts.push_back(random_expert(rng, o.d_model, o.d_ff));
  }
  Rng x_rng(o.seed + 1000 + me);
  const Tensor2 x = x_rng.normal_matrix(tokens, o.d_model);
  ref::RouterConfig rc;
  rc.num_experts = o.experts;
  rc.top_k = o.top_k;
  const mpi::ExpertParallelConfig cfg{rc, o.max_ranks};
  mpi::ExchangeStats st;
  mpi::expert_parallel_layer(comm, x, shard, cfg, {}, &st);  // warm-up: pages, thread pools
  double best = 1e300, exchange = 0, experts = 0;
  for (std::size_t i = 0; i < o.repeat; ++i) {
    MPI_Barrier(comm);
    const double start = MPI_Wtime();
    mpi::expert_parallel_layer(comm, x, shard, cfg, {}, &st);
    double took = MPI_Wtime() - start, slowest = 0;
    MPI_Allreduce(&took, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (slowest < best) {
      best = slowest;
      exchange = st.exchange_seconds;
      experts = st.expert_seconds;
    }
  }
  const std::vector<double> times = gather(comm, {exchange, experts});
  if (rank == 0) {
    std::cout << "moe_mpi --bench: " << R << " ranks x " << tokens << " tokens = " << o.tokens << " tokens in all, d_model "
              << o.d_model << ", d_ff " << o.d_ff << ", E " << o.experts << ", k " << o.top_k
              << (o.max_ranks ? ", max_ranks " + std::to_string(o.max_ranks) : std::string()) << ", " << omp_get_max_threads()
              << " OpenMP threads per rank on " << std::thread::hardware_concurrency() << " cores\n";
    std::cout << "  layer: " << std::fixed << std::setprecision(3) << best << " s (best of " << o.repeat
              << ", slowest rank); per rank, exchanges / experts:";
    for (int q = 0; q < ranks; ++q) std::cout << " " << times[2 * q] << " / " << times[2 * q + 1] << " s" << (q + 1 < ranks ? "," : "");
    std::cout << "\n";
  }
  print_bytes(comm, rank, st, "  bytes per rank and layer:");
  // ranks on this machine (one shared-memory node)
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int here = 1;
  MPI_Comm_size(node, &here);
  MPI_Comm_free(&node);
  if (rank == 0 && R > 1 && here == ranks)
    std::cout << "  (all " << R << " ranks share this machine's " << std::thread::hardware_concurrency()
              << " cores: the total work is the same for every R, so this shows the communication's volume and cost, "
                 "not a speed-up; with a GPU or node per rank, each rank's E/R experts run at once)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  Options o;
  CLI::App app{"chapter 09: the MoE layer with expert parallelism over MPI (run under mpirun -np R)"};
  auto* modes = app.add_option_group("mode");
  modes->add_flag("--check", o.check, "the distributed layer against the single-process one (default)");
  modes->add_flag("--step", o.step, "a tiny layer's dispatch, step by step");
  modes->add_flag("--bench", o.bench, "time one layer (d_model 1024, d_ff 2816, E 8, k 2, 4096 tokens in all)");
  modes->require_option(0, 1);
  app.add_option("--tokens", o.tokens, "tokens per rank (--check, --step), or in all (--bench)");
  app.add_option("--d-model", o.d_model, "model width");
  app.add_option("--d-ff", o.d_ff, "each expert's hidden width");
  app.add_option("--experts", o.experts, "E, routed experts (a multiple of the rank count)");
  app.add_option("--top-k", o.top_k, "k, experts per token");
  app.add_option("--shared", o.shared, "shared experts (--check, --step)");
  app.add_option("--max-ranks", o.max_ranks, "M: each token's experts on at most M ranks (0: no limit)");
  app.add_option("--seed", o.seed, "random seed");
  app.add_option("--repeat", o.repeat, "timed layers (--bench)")->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints the options; a bad option is one line naming it, from rank 0
    const bool help = e.get_exit_code() == 0;
    if (rank == 0 && help) app.exit(e);
    if (rank == 0 && !help) std::cerr << "moe_mpi: " << e.what() << "\n";
    MPI_Finalize();
    return help ? 0 : 2;
  }
  // the sizes of each mode, unless given
  const bool step = o.step, bench = o.bench;
  auto or_default = [](std::size_t& v, std::size_t d) { v = v ? v : d; };
  or_default(o.tokens, bench ? 4096 : step ? 3 : 37);
  or_default(o.d_model, bench ? 1024 : step ? 4 : 48);
  or_default(o.d_ff, bench ? 2816 : step ? 8 : 80);
  // two experts per rank, and at least k + 1 = 3 of them (4: one rank alone)
  if (step && app.count("--experts") == 0) o.experts = std::max<std::size_t>(2 * static_cast<std::size_t>(ranks), 4);
  if (!bench && !step && app.count("--shared") == 0) o.shared = 1;
  // One rank per core at most: each rank gets cores / R OpenMP threads (OMP_NUM_THREADS overrides).
  if (std::getenv("OMP_NUM_THREADS") == nullptr)
    omp_set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks));

  // Bad settings are the same on every rank: each raises before any message, and rank 0 says why.
  try {
    ref::RouterConfig rc;
    rc.num_experts = o.experts;
    rc.top_k = o.top_k;
    mpi::validate_expert_parallel("moe_mpi", {rc, o.max_ranks}, static_cast<std::size_t>(ranks));
    require(!bench || o.tokens % static_cast<std::size_t>(ranks) == 0, "moe_mpi", "--tokens (", o.tokens,
            ") must be a multiple of the rank count (", ranks, "): --bench splits the batch evenly");
  } catch (const Error& e) {
    if (rank == 0) std::cerr << e.what() << "\n";
    MPI_Finalize();
    return 2;
  }
  int status = 0;
  try {
    status = step ? run_step(comm, rank, ranks, o) : bench ? run_bench(comm, rank, ranks, o) : run_check(comm, rank, ranks, o);
  } catch (const std::exception& e) {
    // past the checks above an error may be one rank's only: end them all
    std::cerr << "moe_mpi (rank " << rank << "): " << e.what() << "\n";
    MPI_Abort(comm, 2);
  }
  MPI_Finalize();
  return status;
}

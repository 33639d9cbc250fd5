#include "tvlab/analysis/io_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {
namespace {

// Slow memory: every element that crosses into or out of SRAM goes through load / store, which
// count it. SRAM is plain local vectors; `hold` records how many floats are on chip at once.
struct Hbm {
  IoCount io;
  void load(std::vector<double>& dst, const float* src, std::size_t count) {
    dst.assign(src, src + count);
    io.hbm_reads += static_cast<double>(count);
  }
  void load(std::vector<double>& dst, const double* src, std::size_t count) {
    dst.assign(src, src + count);
    io.hbm_reads += static_cast<double>(count);
  }
  void store(double* dst, const std::vector<double>& src) {
    std::copy(src.begin(), src.end(), dst);
    io.hbm_writes += static_cast<double>(src.size());
  }
  void hold(std::size_t floats) { io.peak_sram = std::max(io.peak_sram, floats); }
};

void check_inputs(const char* fn, const Tensor2& q, const Tensor2& k, const Tensor2& v) {
  require_nonempty(fn, "q", q);
  require_dim(fn, "k", k, 0, "rows", q.shape()[0], "the rows of q");
  require_dim(fn, "k", k, 1, "columns", q.shape()[1], "the columns of q");
  require_dim(fn, "v", v, 0, "rows", q.shape()[0], "the rows of q");
  require_dim(fn, "v", v, 1, "columns", q.shape()[1], "the columns of q (this model uses d_v = d)");
  require_finite(fn, "q", q);
  require_finite(fn, "k", k);
  require_finite(fn, "v", v);
}

Tensor2 to_tensor(const std::vector<double>& o, std::size_t n, std::size_t d) {
  Tensor2 out = Tensor2::from_shape({n, d});
  for (std::size_t i = 0; i < n * d; ++i) out.data()[i] = static_cast<float>(o[i]);
  return out;
}

}  // namespace

IoRun standard_attention_io_run(const Tensor2& q, const Tensor2& k, const Tensor2& v) {
  check_inputs("standard_attention_io_run", q, k, v);
  const std::size_t n = q.shape()[0], d = q.shape()[1];
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Hbm hbm;
  std::vector<double> s_hbm(n * n), p_hbm(n * n), o_hbm(n * d);
  std::vector<double> q_chip, k_chip, v_chip, row, out_row;
  // The paper's accounting of Algorithm 0: each product reads its operands once (an idealised
  // GEMM), each n x n matrix is written once and read once. peak_sram shows what that assumes.
  // Pass 1: load Q and K, compute S = scale Q K^T row by row, write S.
  hbm.load(q_chip, q.data(), n * d);
  hbm.load(k_chip, k.data(), n * d);
  hbm.hold(2 * n * d + n);
  for (std::size_t i = 0; i < n; ++i) {
    row.assign(n, 0.0);
    for (std::size_t j = 0; j < n; ++j) {
      double dot = 0;
      for (std::size_t c = 0; c < d; ++c) dot += q_chip[i * d + c] * k_chip[j * d + c];
      row[j] = scale * dot;
    }
    hbm.store(s_hbm.data() + i * n, row);
  }
  // Pass 2: read S row by row, P = softmax(S), write P.
  for (std::size_t i = 0; i < n; ++i) {
    hbm.load(row, s_hbm.data() + i * n, n);
    const double m = *std::max_element(row.begin(), row.end());
    double l = 0;
    for (double& x : row) l += (x = std::exp(x - m));
    for (double& x : row) x /= l;
    hbm.store(p_hbm.data() + i * n, row);
  }
  // Pass 3: load V, read P row by row, O = P V, write O.
  hbm.load(v_chip, v.data(), n * d);
  hbm.hold(n * d + n + d);
  for (std::size_t i = 0; i < n; ++i) {
    hbm.load(row, p_hbm.data() + i * n, n);
    out_row.assign(d, 0.0);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t c = 0; c < d; ++c) out_row[c] += row[j] * v_chip[j * d + c];
    hbm.store(o_hbm.data() + i * d, out_row);
  }
  return {to_tensor(o_hbm, n, d), hbm.io, 0, 0};
}

IoRun flash_attention_io_run(const Tensor2& q, const Tensor2& k, const Tensor2& v, std::size_t sram) {
  const char* fn = "flash_attention_io_run";
  check_inputs(fn, q, k, v);
  const std::size_t n = q.shape()[0], d = q.shape()[1];
  require(sram >= 4 * d, fn, "sram_floats (", sram, ") must be at least 4 d = ", 4 * d, ": no tile fits");
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // Line 1: B_c = ceil(M / 4d), B_r = min(B_c, d).
  const std::size_t block_c = (sram + 4 * d - 1) / (4 * d), block_r = std::min(block_c, d);
  Hbm hbm;
  // Line 2: O = 0, l = 0, m = -inf in HBM.
  std::vector<double> o_hbm(n * d, 0.0), l_hbm(n, 0.0), m_hbm(n, -std::numeric_limits<double>::infinity());
  std::vector<double> kj, vj, qi, oi, li, mi;
  for (std::size_t c0 = 0; c0 < n; c0 += block_c) {  // line 5: key/value tiles
    const std::size_t cols = std::min(block_c, n - c0);
    hbm.load(kj, k.data() + c0 * d, cols * d);  // line 6
    hbm.load(vj, v.data() + c0 * d, cols * d);
    for (std::size_t r0 = 0; r0 < n; r0 += block_r) {  // line 7: query tiles
      const std::size_t rows = std::min(block_r, n - r0);
      hbm.load(qi, q.data() + r0 * d, rows * d);  // line 8
      hbm.load(oi, o_hbm.data() + r0 * d, rows * d);
      hbm.load(li, l_hbm.data() + r0, rows);
      hbm.load(mi, m_hbm.data() + r0, rows);
      // On chip: K_j, V_j, Q_i, O_i, l_i, m_i and the B_r x B_c tile S_ij.
      hbm.hold(2 * cols * d + 2 * rows * d + 2 * rows + rows * cols);
      for (std::size_t r = 0; r < rows; ++r) {
        // Line 9-10: S = scale q_r K_j^T, m~ = rowmax, P~ = e^{S - m~}, l~ = rowsum.
        std::vector<double> s(cols);
        double m_tile = -std::numeric_limits<double>::infinity();
        for (std::size_t c = 0; c < cols; ++c) {
          double dot = 0;
          for (std::size_t e = 0; e < d; ++e) dot += qi[r * d + e] * kj[c * d + e];
          s[c] = scale * dot;
          m_tile = std::max(m_tile, s[c]);
        }
        double l_tile = 0;
        for (double& x : s) l_tile += (x = std::exp(x - m_tile));
        // Line 11: m_new = max(m, m~), l_new = e^{m - m_new} l + e^{m~ - m_new} l~.
        const double m_new = std::max(mi[r], m_tile);
        const double a = std::exp(mi[r] - m_new), b = std::exp(m_tile - m_new);  // e^{-inf} = 0 on the first tile
        const double l_new = a * li[r] + b * l_tile;
        // Line 12: O_i = diag(l_new)^-1 (diag(l) e^{m - m_new} O_i + e^{m~ - m_new} P~ V_j).
        for (std::size_t e = 0; e < d; ++e) {
          double pv = 0;
          for (std::size_t c = 0; c < cols; ++c) pv += s[c] * vj[c * d + e];
          oi[r * d + e] = (li[r] * a * oi[r * d + e] + b * pv) / l_new;
        }
        li[r] = l_new;
        mi[r] = m_new;
      }
      hbm.store(o_hbm.data() + r0 * d, oi);  // lines 12-13: write O_i, l_i, m_i back
      hbm.store(l_hbm.data() + r0, li);
      hbm.store(m_hbm.data() + r0, mi);
    }
  }
  return {to_tensor(o_hbm, n, d), hbm.io, block_r, block_c};
}

IoCount standard_attention_io(std::size_t n, std::size_t d) {
  const auto N = static_cast<double>(n), D = static_cast<double>(d);
  IoCount io;
  // Reads: Q and K (2 n d), S (n^2), P (n^2), V (n d). Writes: S, P (2 n^2) and O (n d).
  io.hbm_reads = 3 * N * D + 2 * N * N;
  io.hbm_writes = 2 * N * N + N * D;
  io.peak_sram = std::max(2 * n * d + n, n * d + n + d);
  return io;
}

IoCount flash_attention_io(std::size_t n, std::size_t d, std::size_t sram) {
  require(d > 0 && sram >= 4 * d, "flash_attention_io", "sram_floats (", sram, ") must be at least 4 d = ", 4 * d);
  const std::size_t block_c = (sram + 4 * d - 1) / (4 * d), block_r = std::min(block_c, d);
  return flash_attention_io(n, d, block_r, block_c);
}

std::size_t flash_tile_floats(std::size_t d, std::size_t block_r, std::size_t block_c) {
  // K_j, V_j: 2 B_c d; Q_i, O_i: 2 B_r d; l_i, m_i: 2 B_r; the score tile S_ij: B_r B_c.
  return 2 * block_c * d + 2 * block_r * d + 2 * block_r + block_r * block_c;
}

IoCount flash_attention_io(std::size_t n, std::size_t d, std::size_t block_r, std::size_t block_c) {
  const char* fn = "flash_attention_io";
  require(n > 0, fn, "n (", n, ") must be positive");
  require(d > 0, fn, "d (", d, ") must be positive");
  require(block_r > 0, fn, "block_r (", block_r, ") must be positive");
  require(block_c > 0, fn, "block_c (", block_c, ") must be positive");
  const auto N = static_cast<double>(n), D = static_cast<double>(d);
  const double t_c = std::ceil(N / static_cast<double>(block_c));
  IoCount io;
  // K and V once (2 n d); per key tile, all of Q, O, l, m read (2 n d + 2 n) and O, l, m written.
  io.hbm_reads = 2 * N * D + t_c * (2 * N * D + 2 * N);
  io.hbm_writes = t_c * (N * D + 2 * N);
  io.peak_sram = flash_tile_floats(d, std::min(block_r, n), std::min(block_c, n));
  return io;
}

FlashTiles best_flash_tiles(std::size_t n, std::size_t d, std::size_t sram) {
  const char* fn = "best_flash_tiles";
  require(n > 0 && d > 0, fn, "n (", n, ") and d (", d, ") must be positive");
  require(flash_tile_floats(d, 1, 1) <= sram, fn, "sram_floats (", sram, ") is below the smallest tiles' ",
          flash_tile_floats(d, 1, 1), " floats");
  // The traffic depends on B_c only (each key tile streams Q and O once), so: the largest B_c
  // that fits with B_r = 1, then the largest B_r that still fits with that B_c.
  std::size_t block_c = 1;
  while (block_c < n && flash_tile_floats(d, 1, block_c + 1) <= sram) ++block_c;
  // Fewer key tiles is what counts: shrink B_c while the number of key tiles stays the same
  // (it leaves room for a larger B_r).
  const std::size_t key_tiles = (n + block_c - 1) / block_c;
  block_c = (n + key_tiles - 1) / key_tiles;
  std::size_t block_r = 1;
  while (block_r < n && flash_tile_floats(d, block_r + 1, block_c) <= sram) ++block_r;
  return {block_r, block_c, flash_attention_io(n, d, block_r, block_c)};
}

}  // namespace tvlab::analysis

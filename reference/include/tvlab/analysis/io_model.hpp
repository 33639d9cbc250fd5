#pragma once
/// @file
/// The IO model of the FlashAttention paper (chapter 04): how many elements move between slow
/// memory (HBM) and fast on-chip memory (SRAM, M floats) in standard attention and in the tiled
/// algorithm, counted by running both algorithms with every load and store going through a counter.

#include <cstddef>

#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// Elements read from and written to HBM, and the most on-chip floats held at once.
struct IoCount {
  double hbm_reads = 0, hbm_writes = 0;
  std::size_t peak_sram = 0;
  double total() const { return hbm_reads + hbm_writes; }
};

/// A run of one of the algorithms on one head: its output `[n, d]` and what it moved.
struct IoRun {
  Tensor2 out;
  IoCount io;
  std::size_t block_r = 0, block_c = 0;  ///< the tile sizes used (flash only)
};

/// Algorithm 0 of FlashAttention (Dao et al., 2022), counted as the paper counts it: S = QK^T
/// written to HBM, read back for P = softmax(S), P written, read back with V for O = PV; each
/// product reads its operands once (an idealised GEMM; `peak_sram` shows the on-chip memory that
/// assumes). The \f$ n \times n \f$ matrices cross the bus four times: \f$ 4n^2 + 4nd \f$ elements.
/// q, k, v are `[n, d]`; scores use \f$ 1/\sqrt d \f$.
IoRun standard_attention_io_run(const Tensor2& q, const Tensor2& k, const Tensor2& v);

/// Algorithm 1 of FlashAttention with on-chip memory of `sram_floats` floats:
/// \f$ B_c = \lceil M / 4d \rceil \f$, \f$ B_r = \min(B_c, d) \f$; the outer loop loads each \f$ K_j, V_j \f$
/// once, the inner loop loads \f$ Q_i, O_i, \ell_i, m_i \f$ and writes \f$ O_i, \ell_i, m_i \f$ back.
/// Traffic \f$ \Theta(n^2 d^2 / M) \f$. The paper's sizing is asymptotic: it ignores the score tile and
/// \f$ \ell, m \f$, so `peak_sram` can exceed M. Throws `tvlab::Error` when M < 4d (the sizing gives
/// no tile) or the inputs do not match.
IoRun flash_attention_io_run(const Tensor2& q, const Tensor2& k, const Tensor2& v, std::size_t sram_floats);

/// The counts those runs report, from the loop structure alone (no data); exact.
IoCount standard_attention_io(std::size_t n, std::size_t d);
IoCount flash_attention_io(std::size_t n, std::size_t d, std::size_t sram_floats);

/// The same count for tiles of `block_r` query rows and `block_c` key rows chosen freely
/// (`peak_sram` = `flash_tile_floats(d, block_r, block_c)` for n at least a tile).
IoCount flash_attention_io(std::size_t n, std::size_t d, std::size_t block_r, std::size_t block_c);

/// On-chip floats Algorithm 1 holds for one pair of tiles: \f$ K_j, V_j \f$ (\f$ 2B_cd \f$),
/// \f$ Q_i, O_i \f$ (\f$ 2B_rd \f$), \f$ \ell_i, m_i \f$ (\f$ 2B_r \f$) and the score tile (\f$ B_rB_c \f$).
std::size_t flash_tile_floats(std::size_t d, std::size_t block_r, std::size_t block_c);

/// Tile sizes for Algorithm 1 and the traffic they give.
struct FlashTiles {
  std::size_t block_r = 0, block_c = 0;
  IoCount io;
};

/// @ingroup ch04
/// The tile sizes \f$ (B_r, B_c) \f$, \f$ 1 \le B_r, B_c \le n \f$, whose tiles fit in `sram_floats`
/// (`flash_tile_floats` <= M) and that move the fewest elements in Algorithm 1; among equal
/// traffic, the largest \f$ B_r \f$ (fewer, larger query tiles). Throws `tvlab::Error` when not even
/// \f$ B_r = B_c = 1 \f$ fits.
FlashTiles best_flash_tiles(std::size_t n, std::size_t d, std::size_t sram_floats);

}  // namespace tvlab::analysis

#pragma once
/// @file
/// Chapter 08, QuIP#'s E8P codebook: \f$ 2^{16} \f$ points of \f$ E_8 + \frac14 \f$ for 8 weights, 2 bits per weight
/// (Tseng et al. 2024, "QuIP#: Even Better LLM Quantization with Hadamard Incoherence and Lattice
/// Codebooks", sec. 4.2, "E8P"; its code: `lib/codebook/latticee8_padded12.py` of
/// Cornell-RelaxML/quip-sharp, functions `get_norm12`, `get_packed_abs_grid`, `get_full_grid`, and the
/// CUDA decoder `decompress_packed_e8p_kernel` of `quiptools/quiptools.cu`; 000 L263).
///
/// **The points.** Start from the half-integer coset of E8, the vectors x with every
/// \f$ x_i \in \mathbb{Z} + \frac12 \f$ and \f$ \sum_i x_i \f$ even. None of their coordinates is 0, so each is an
/// "absolute vector" \f$ |x| \f$ and a sign pattern; flipping one sign changes the sum by the odd number
/// \f$ 2|x_i| \f$, so the even sum allows exactly half of the \f$ 2^8 \f$ patterns. E8P keeps 256 absolute vectors:
/// - the 227 of \f$ \lVert v \rVert^2 \le 10 \f$ (entries in \f$ \{\frac12, \frac32, \frac52\} \f$: all \f$ \frac12 \f$ and up to four
///   \f$ \frac32 \f$, 163; one \f$ \frac52 \f$, 8; one \f$ \frac52 \f$ and one \f$ \frac32 \f$, 56), in lexicographic order,
/// - then 29 of the 56 vectors of norm 12 (five \f$ \frac32 \f$, three \f$ \frac12 \f$), listed in `get_norm12`,
///
/// each with its 128 sign patterns of even sum, and each of those 32,768 points shifted by
/// \f$ +\frac14 \f$ or \f$ -\frac14 \f$ in every coordinate: 65,536 points. All lie in \f$ E_8 + \frac14 \f$, because
/// \f$ -\frac14\mathbf 1 = \frac14\mathbf 1 - \frac12\mathbf 1 \f$ and \f$ \frac12\mathbf 1 \in E_8 \f$. The shift makes the set symmetric
/// about 0 without a point at 0, and the 29 vectors of norm 12 pad 227 to the 256 an index byte holds.
///
/// **The 16-bit code** (as `get_full_grid` and the CUDA decoder read it): bits 15..8 are the
/// index a of the absolute vector, bits 7..0 a sign byte s. The parity \f$ p \f$ of s (its number of
/// ones, mod 2) is the shift, \f$ +\frac14 \f$ for \f$ p = 0 \f$ and \f$ -\frac14 \f$ for \f$ p = 1 \f$; when \f$ p = 1 \f$, bit 0 of s is
/// toggled, which leaves an even number of ones: 7 free sign bits and 1 shift bit. The table stores
/// \f$ b = |x| \f$ with \f$ b_7 \f$ negated when \f$ \sum_i |x_i| \f$ is odd, so b itself has an even sum; bit
/// `kE8PSignBit[i]` of the toggled s negates coordinate i. So
/// \f[ x_i = (-1)^{s_{\sigma(i)}}\, b_i + \tfrac14 (-1)^{p}. \f]
/// The order \f$ \sigma = (0, 4, 1, 5, 2, 6, 3, 7) \f$ exists for the GPU: its 32-bit table entry holds
/// coordinates 0, 2, 4, 6 in the low nibbles and 1, 3, 5, 7 in the high ones, so that one shift of the
/// word yields the two fp16 halves of coordinates (2k, 2k + 1), and sign bit k goes with nibble k.
/// The kernels pack four such codes into 64 bits (four index bytes, then the four sign bytes
/// interleaved); that layout is storage, not the code, and is not reproduced here.
///
/// **The scale.** QuIP# quantizes \f$ W / s \f$ with one fixed scale per matrix,
/// \f$ s = \mathrm{rms}(W) / 1.03 \f$ (`lib/algo/quip.py`: `Wscale = Wr.square().mean().sqrt() / opt_scale`,
/// `opt_scale = 1.03` for E8P, next to a sweep of the scale over Gaussian samples; the tests find the
/// same optimum), after the randomized Hadamard transform has made the entries Gaussian-like. It is
/// set once from the weights, not searched per row; QuIP#'s later fine-tuning stage is not modelled.
///
/// **Nearest codeword, exactly, without trying all 65,536.** For a shift t and an absolute vector v,
/// the best signs are those of \f$ z = y - t \f$; with \f$ \lVert x \rVert = \lVert v \rVert \f$ fixed,
/// \f$ \lVert z - x \rVert^2 = \lVert z \rVert^2 + \lVert v \rVert^2 - 2 \sum_i v_i |z_i| \f$. If that pattern has the wrong parity
/// (\f$ \sum_i v_i \f$ plus the number of negative \f$ z_i \f$ odd), the cheapest repair flips the coordinate of least
/// \f$ v_i |z_i| \f$ and costs \f$ 4 \min_i v_i |z_i| \f$. That is 2 x 256 candidates of 8 products each instead of
/// 65,536 distances (QuIP#'s current `quantize` scores the whole grid on the GPU; earlier versions
/// folded the signs first and searched a reduced grid). The tests hold it equal to the brute-force search.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tvlab/analysis/e8_lattice.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// @ingroup ch08
/// QuIP#'s fixed scale factor for E8P: weights are divided by \f$ \mathrm{rms}(W) / 1.03 \f$.
inline constexpr double kE8POptScale = 1.03;

/// @ingroup ch08
/// Which bit of the sign byte negates coordinate i (\f$ \sigma \f$ above).
inline constexpr std::array<int, 8> kE8PSignBit = {0, 4, 1, 5, 2, 6, 3, 7};

/// @ingroup ch08
/// The 256 absolute vectors in code order, each entry \f$ 2|x_i| \f$ (an odd integer: 1, 3 or 5).
const std::array<std::array<int, 8>, 256>& e8p_abs_grid();

/// @ingroup ch08
/// The 8 values of a code (unit scale), as the formula above.
Vec8 e8p_decode(std::uint16_t code);

/// @ingroup ch08
/// The code of the codeword nearest to y in Euclidean distance (exact; ties to the +1/4 shift,
/// then the lower absolute index). Errors: a value of y that is not finite.
std::uint16_t e8p_encode(const Vec8& y);

/// @ingroup ch08
/// QuIP#'s scale for w: \f$ \mathrm{rms}(W) / 1.03 \f$ over the whole matrix (1 for an all-zero w). Errors: an
/// empty w, a value that is not finite.
double e8p_scale(const DTensor2& w);

/// @ingroup ch08
/// The codes of w `[m, n]`, row by row, 8 weights each: code(j) of row r is `e8p_encode(w[r, 8j..8j+7] / scale)`,
/// stored at r n/8 + j. Errors: an empty w, n not a multiple of 8, a value that is not finite, a scale
/// that is not positive and finite.
std::vector<std::uint16_t> e8p_encode_rows(const DTensor2& w, double scale);

/// @ingroup ch08
/// The weights `[rows, cols]` those codes stand for, scale times the decoded values. Errors: a code
/// count that is not rows cols / 8, cols not a multiple of 8, a scale that is not positive and finite.
DTensor2 e8p_decode_rows(const std::vector<std::uint16_t>& codes, std::size_t rows, std::size_t cols, double scale);

/// @ingroup ch08
/// `e8p_decode_rows(e8p_encode_rows(w, scale), ...)`: w as E8P gives it back (same errors).
DTensor2 e8p_quantize_rows(const DTensor2& w, double scale);

/// @ingroup ch08
/// Storage in bits per weight: 16 bits per code over the number of weights they stand for (the one
/// scale per matrix not counted). Errors: zero weights.
double e8p_bits_per_weight(std::size_t num_codes, std::size_t num_weights);

/// @ingroup ch08
/// One 2-bit code in the comparison: its bits per weight, the mean squared error per weight of
/// \f$ \hat W \f$, and the relative output error \f$ \lVert (W - \hat W) X \rVert_F / \lVert W X \rVert_F \f$, directly and through
/// the randomized Hadamard rotation.
struct TwoBitRow {
  std::string code;
  double bits = 0.0;
  double mse = 0.0, mse_rotated = 0.0;
  double output_error = 0.0, output_error_rotated = 0.0;
};

/// @ingroup ch08
/// The uniform 2-bit grid (`uniform_2bit_rows`), the ball of E8 points (`e8_quantize_rows`) and E8P at
/// QuIP#'s scale (`e8p_quantize_rows(w, e8p_scale(w))`) on w `[m, n]` (powers of two, n a multiple of 8),
/// outputs on the columns of x `[n, k]`, rotation signs from `seed`. Errors: those of the codes and of
/// `incoherent_rotation`, x's row count not n.
std::vector<TwoBitRow> two_bit_comparison(const DTensor2& w, const DTensor2& x, std::uint64_t seed);

}  // namespace tvlab::analysis

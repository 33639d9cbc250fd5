#pragma once
/// @file
/// Chapter 05, KV cache quantization (the cache side): keys or values `[num_kv_heads, seq, head_dim]`
/// stored as small integer or FP8 codes plus one scale per *group* of elements, so that a token
/// costs fewer bytes than its 2 (fp16) bytes per element. A group is the set of elements that share
/// a scale:
/// - **per token** (`KvScaleAxis::per_token`): `group_size` consecutive channels of one token of one
///   head (`group_size = head_dim` is one scale per token and head);
/// - **per channel** (`KvScaleAxis::per_channel`): one channel of one head over `group_size`
///   consecutive tokens (the last group of a sequence may be shorter).
///
/// KIVI (Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache") observes
/// that keys have a few channels of large magnitude (outlier channels) while values do not, and
/// quantizes keys per channel and values per token: a per-channel scale fits each key channel's own
/// range instead of letting the outlier channel set the step of every channel of the token. (KIVI
/// groups the keys of \f$ G \f$ tokens per channel and keeps the tokens of a group not yet complete in
/// full precision while it fills; here a whole tensor is quantized at once, and the last group of
/// tokens is simply shorter.)
///
/// The mappings (\f$ x \f$ an element, \f$ G \f$ its group, \f$ s \f$ the group's scale, \f$ q \f$ the code):
/// - symmetric absmax, \f$ B \f$-bit integers: \f$ s = \max_G |x| / Q \f$ with \f$ Q = 2^{B-1} - 1 \f$
///   (127 for INT8, 7 for INT4), \f$ q = \mathrm{round}(x / s) \in [-Q, Q] \f$, \f$ \hat x = s\,q \f$;
/// - asymmetric min/max (KIVI's quantizer, the minimum as zero point; also FlexGen's group-wise 4-bit,
///   Sheng et al. 2023):
///   \f$ z = \min_G x \f$, \f$ s = (\max_G x - z) / (2^B - 1) \f$,
///   \f$ q = \mathrm{round}((x - z)/s) \in [0, 2^B - 1] \f$, \f$ \hat x = z + s\,q \f$;
/// - FP8 E4M3 with a scale: \f$ s = \max_G |x| / 448 \f$, \f$ q = \mathrm{e4m3}(x / s) \f$ (core's round trip,
///   `tvlab/core/dtype.hpp`), \f$ \hat x = s\,q \f$: the largest element lands on E4M3's largest value.
///
/// Rounding is to nearest, ties to even (as `torch.round`). Every element then satisfies
/// \f$ |x - \hat x| \le \Delta/2 \f$, half the quantization step at that element: \f$ s/2 \f$ for the
/// integer formats, \f$ s\,u(q)/2 \f$ for E4M3 where \f$ u(q) \f$ is the spacing of E4M3 values at
/// \f$ |q| \f$ (\f$ 2^{e-3} \f$ in the binade \f$ [2^e, 2^{e+1}) \f$, \f$ 2^{-9} \f$ below \f$ 2^{-6} \f$).
/// A group whose elements are all equal gets \f$ s = 0 \f$ and is stored exactly. Scales and minimums
/// are stored as float32.
/// @ingroup ch05

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// The code stored per element.
enum class KvCodeType {
  int8,      ///< 8-bit integer (1 byte)
  int4,      ///< 4-bit integer, two per byte (low nibble first)
  fp8_e4m3,  ///< OCP FP8 E4M3 bits (1 byte), always symmetric
};

/// Along which axis the elements that share one scale run.
enum class KvScaleAxis {
  per_token,    ///< `group_size` channels of one token (and head)
  per_channel,  ///< one channel (and head) over `group_size` tokens
};

/// How a key or value tensor is quantized.
struct KvQuantSpec {
  KvCodeType code = KvCodeType::int8;
  KvScaleAxis axis = KvScaleAxis::per_token;
  std::size_t group_size = 0;  ///< elements per scale along `axis`; per token it must divide head_dim
  bool symmetric = true;       ///< absmax around 0, or min/max with the minimum as zero point
};

/// INT8, one symmetric scale per token and head (group = `head_dim`).
KvQuantSpec int8_per_token(std::size_t head_dim);
/// INT8, one symmetric scale per channel and head over `tokens_per_group` tokens (KIVI's layout for keys).
KvQuantSpec int8_per_channel(std::size_t tokens_per_group);
/// INT4, one scale per `group_size` channels of a token; asymmetric min/max unless `symmetric`.
KvQuantSpec int4_per_group(std::size_t group_size, bool symmetric = false);
/// FP8 E4M3 with one scale per token and head.
KvQuantSpec fp8_e4m3_per_token(std::size_t head_dim);

/// Bits of one code: 8, 4 or 8.
std::size_t code_bits(KvCodeType code);
/// "int4 per token, groups of 32, asymmetric", for labels and messages.
std::string describe(const KvQuantSpec& spec);

/// Checks `spec` for tensors of `head_dim` channels, for `function`: group_size >= 1, dividing
/// head_dim when per token; FP8 only symmetric. Throws `tvlab::Error` naming `spec.group_size` or
/// `spec.symmetric`.
void validate_kv_quant_spec(const char* function, const KvQuantSpec& spec, std::size_t head_dim);

/// @ingroup ch05
/// The bytes one token costs in a cache of `num_kv_heads` heads of `head_dim` quantized as `spec`,
/// for one tensor (keys or values), codes plus float32 scales (and minimums when asymmetric):
/// \f[ \text{bytes} = g\,d\,\frac{B}{8} + 4\,(1 + [\text{asymmetric}])\,\frac{g\,d}{G}: \f]
/// \f$ B \f$-bit codes, and one scale (and minimum) per group of \f$ G \f$ elements. Per token a token
/// carries \f$ d/G \f$ scales per head; per channel a head's \f$ d \f$ scales are shared by \f$ G \f$
/// tokens, which gives the same average over a full group of tokens. Checks the spec as
/// `validate_kv_quant_spec`; \f$ g \f$ = `num_kv_heads`, \f$ d \f$ = `head_dim`, \f$ G \f$ = `spec.group_size`.
double kv_bytes_per_token(const KvQuantSpec& spec, std::size_t num_kv_heads, std::size_t head_dim);

/// @ingroup ch05
/// A quantized key or value tensor `[heads, seq, head_dim]`: codes and the scales of each group.
struct QuantizedKv {
  KvQuantSpec spec;
  std::size_t heads = 0, seq = 0, head_dim = 0;
  /// Row-major over (head, token, channel): INT8 as a two's complement byte, INT4 two per byte
  /// (element e in byte e/2, the low nibble when e is even; two's complement when symmetric), E4M3 bits.
  std::vector<std::uint8_t> codes;
  /// One per group: per token `[heads, seq, head_dim / group_size]`, per channel
  /// `[heads, ceil(seq / group_size), head_dim]`.
  std::vector<float> scales;
  /// The groups' minimums \f$ z \f$ (asymmetric only; empty otherwise), laid out as `scales`.
  std::vector<float> minimums;

  /// The group of element (h, t, c): its index in `scales`.
  std::size_t group_index(std::size_t h, std::size_t t, std::size_t c) const;
  /// The code of element (h, t, c) as an integer: \f$ q \f$ (integers) or the E4M3 bits.
  int code(std::size_t h, std::size_t t, std::size_t c) const;
  /// \f$ \hat x \f$ of element (h, t, c), in double (exact for the symmetric formats).
  double dequantized(std::size_t h, std::size_t t, std::size_t c) const;
  /// \f$ \Delta/2 \f$ at element (h, t, c): the largest \f$ |x - \hat x| \f$ the rounding allows.
  double half_step(std::size_t h, std::size_t t, std::size_t c) const;
  /// Bytes held: codes plus 4 per scale and per minimum.
  std::size_t bytes() const { return codes.size() + 4 * (scales.size() + minimums.size()); }
};

/// @ingroup ch05
/// Quantizes `x` `[heads, seq, head_dim]` (finite, non-empty) as `spec`. `tvlab::Error` naming
/// `x` or the spec's field otherwise.
QuantizedKv quantize_kv(const Tensor3& x, const KvQuantSpec& spec);

/// @ingroup ch05
/// \f$ \hat x \f$ of every element, `[heads, seq, head_dim]`, rounded to float.
Tensor3 dequantize_kv(const QuantizedKv& x);

}  // namespace tvlab

#pragma once
/// @file
/// Chapter 06's causal linear attention on a CUDA device, host tensors in and out: the recurrence
/// (token by token; one token is the decode step) and the chunked form, with the names, signatures,
/// checks and error messages of `tvlab/ref/linear_attention.hpp`. The device-pointer entry point is
/// in `tvlab/cuda/linear_attention_device.hpp`.
///
/// The columns of the state are independent (\f$ S_{:,e} = \sum_j \phi(k_j)\, v_{j,e} \f$), so the
/// grid is (head, block of 32 value columns) and a thread block keeps its 32 columns of S, all m
/// rows, in shared memory, in float. Per chunk of C positions the chunked kernel stages
/// \f$ \text{scale}\,\phi(Q_{[c]}) \f$ and \f$ \phi(K_{[c]}) \f$ `[C, m]`, forms the masked
/// \f$ A = \phi(Q_{[c]})\phi(K_{[c]})^\top \odot M \f$ `[C, C]`, reads the outputs as
/// \f$ \phi(Q_{[c]}) S_{[c-1]} + A V_{[c]} \f$ and carries \f$ S_{[c]} = S_{[c-1]} + \phi(K_{[c]})^\top V_{[c]} \f$.
/// Where a normaliser is zero or a value leaves float's range on the device, the call returns the
/// reference's answer, or throws its error.
/// @ingroup ch06

#include <cstddef>

#include "tvlab/core/linear_attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch06
/// See `ref::causal_linear_attention_recurrent`: from `state`, which it updates (unchanged when
/// the call throws). One token (n = 1) is a decode step.
Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state);

/// @ingroup ch06
/// See `ref::causal_linear_attention_chunked`: chunks of `chunk_size` positions (the last may be
/// shorter). Throws `tvlab::Error` naming `chunk_size` when it is 0, or when a chunk's
/// \f$ (2 C m + C^2 + 33 C + 33 m) \f$ floats of shared memory exceed the device's limit per block.
Tensor3 causal_linear_attention_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const LinearAttentionConfig& cfg, std::size_t chunk_size,
                                        LinearAttentionState& state);

}  // namespace tvlab::cuda

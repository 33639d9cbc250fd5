#pragma once
/// @file
/// The 2:4-sparse matrix–vector product on the CPU (chapter 08), the kernel that makes 2:4
/// pruning pay: it reads the kept values and their 2-bit positions (here one byte each) and never
/// the zeros, so a row costs \f$ \tfrac{1}{2}\cdot 4 + \tfrac{1}{2} \f$ = 2.5 bytes per dense weight instead
/// of 4, and half the multiplications.
///
/// With AVX-512, sixteen kept values cover eight groups of 4, i.e. 32 entries of x: the positions
/// become indices \f$ 4\lfloor i/2 \rfloor + p_i \f$ into those 32, one `vpermt2ps` fetches the sixteen
/// x values the kept weights meet, and one FMA adds the products into sixteen running sums per
/// row. (AVX2: eight kept values, two 8-float permutes and a blend.) Threads take rows.
///
/// Against `tvlab::ref::sparse_2_4_gemv`, which sums in double: float sums in another order, so
/// the results agree to the float rounding of the sum, not bit for bit.

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/pruning.hpp"

namespace tvlab::opt {

/// @ingroup ch08
/// Same contract and errors as `ref::sparse_2_4_gemv`; float accumulation (16 partial sums per row
/// with AVX-512, 8 with AVX2, then added).
Tensor1 sparse_2_4_gemv(const ref::Sparse24& s, const Tensor1& x);

}  // namespace tvlab::opt

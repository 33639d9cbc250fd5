#pragma once
/// @file
/// Which OpenBLAS kernel runs, and how to get the right one. OpenBLAS chooses its kernels once,
/// when the library loads, from the CPU model it recognises. On a CPU it does not know (common
/// under virtualisation) it falls back to a generic kernel — "Prescott", SSE3 — that is several
/// times slower than the AVX2 or AVX-512 kernels the CPU could run. The environment variable
/// `OPENBLAS_CORETYPE` overrides the choice, but only at load time.

#include <string>

namespace tvlab::opt {

/// The kernel family OpenBLAS is running ("Prescott", "Haswell", "SkylakeX", ...).
std::string blas_core_name();

/// The best OpenBLAS core type this CPU supports, from its instruction-set flags: "SkylakeX"
/// (AVX-512 F/BW/DQ/VL), "Haswell" (AVX2 and FMA), "Sandybridge" (AVX), or "" (nothing better
/// than SSE3).
std::string best_blas_core_type();

/// For programs whose timings matter (the benchmarks): when `OPENBLAS_CORETYPE` is unset and
/// OpenBLAS runs a weaker kernel than `best_blas_core_type()`, sets the variable and re-executes
/// the program with the same arguments, so that OpenBLAS loads the right kernel. Returns
/// otherwise (nothing to do, the variable already set, or the re-execution impossible).
void use_the_best_blas_kernel(char** argv);

}  // namespace tvlab::opt

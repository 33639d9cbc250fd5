#include "tvlab/opt/blas_kernel.hpp"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>

namespace tvlab::opt {
namespace {

// The instruction-set level of an OpenBLAS core name: 1 SSE, 2 AVX, 3 AVX2, 4 AVX-512; 0 unknown.
int level_of_core(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* sse : {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "katmai", "coppermine",
                          "northwood", "banias", "opteron", "barcelona"})
    if (name == sse) return 1;
  if (name == "sandybridge" || name == "bulldozer" || name == "piledriver") return 2;
  if (name == "haswell" || name == "zen" || name == "excavator" || name == "steamroller") return 3;
  if (name == "skylakex" || name == "cooperlake" || name == "sapphirerapids") return 4;
  return 0;
}

int level_of_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return 4;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 3;
  if (__builtin_cpu_supports("avx")) return 2;
  return 1;
}

}  // namespace

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string best_blas_core_type() {
  switch (level_of_cpu()) {
    case 4: return "SkylakeX";
    case 3: return "Haswell";
    case 2: return "Sandybridge";
    default: return "";
  }
}

void use_the_best_blas_kernel(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // chosen by the user, or already re-executed
  const int running = level_of_core(blas_core_name()), possible = level_of_cpu();
  if (running == 0 || running >= possible) return;
  const std::string type = best_blas_core_type();
  std::cerr << "[ tvlab ] OpenBLAS chose its " << blas_core_name() << " kernel on a CPU that runs " << type
            << "'s; restarting with OPENBLAS_CORETYPE=" << type << "\n";
  setenv("OPENBLAS_CORETYPE", type.c_str(), 1);
  execv("/proc/self/exe", argv);
  std::cerr << "[ tvlab ] could not restart (" << argv[0] << "); continuing with " << blas_core_name() << "\n";
}

}  // namespace tvlab::opt

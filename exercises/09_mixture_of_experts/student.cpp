// exercises/09_mixture_of_experts/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: ab54b8c67ee2e746

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tvlab/core/error.hpp"
#include "tvlab/student/moe.hpp"

namespace tvlab::student {

Routing route_top_k(const Tensor2& logits, const ref::RouterConfig& cfg, const std::vector<float>& bias) {
  // EXERCISE 09.1 begins: top-k routing with renormalised gates. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 09.1: top-k routing with renormalised gates; read chapters/09_mixture_of_experts/README.md, section \"Routing: the top k of E\"");
  // EXERCISE 09.1 ends
}

Routing apply_capacity(const Routing& r, std::size_t capacity, ref::CapacityPriority priority) {
  // EXERCISE 09.2 begins: token dropping at an expert capacity (Switch and GShard priorities). Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 09.2: token dropping at an expert capacity (Switch and GShard priorities); read chapters/09_mixture_of_experts/README.md, section \"Capacity and dropped tokens\"");
  // EXERCISE 09.2 ends
}

std::vector<float> update_bias(const std::vector<float>& bias, const std::vector<std::size_t>& load, float gamma) {
  // EXERCISE 09.3 begins: one step of DeepSeek-V3's auxiliary-loss-free bias update. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 09.3: one step of DeepSeek-V3's auxiliary-loss-free bias update; read chapters/09_mixture_of_experts/README.md, section \"Balancing without a loss\"");
  // EXERCISE 09.3 ends
}

}  // namespace tvlab::student

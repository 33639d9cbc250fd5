// exercises/06_linear_attention/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: a907b8b45704a350

#include <algorithm>
#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/delta_rule.hpp"
#include "tvlab/student/linear_attention.hpp"

namespace tvlab::student {

Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state) {
  // EXERCISE 06.1 begins: causal linear attention: the recurrence S_t = S_{t-1} + phi(k_t) v_t^T with its normaliser z_t. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 06.1: causal linear attention: the recurrence S_t = S_{t-1} + phi(k_t) v_t^T with its normaliser z_t; read chapters/06_linear_attention/README.md, section \"Causal linear attention, three ways\"");
  // EXERCISE 06.1 ends
}

Tensor1 gated_delta_rule_step(Tensor2& state, const Tensor1& q, const Tensor1& k, const Tensor1& v, double beta,
                              const Tensor1& log_gate, double scale) {
  // EXERCISE 06.2 begins: one token of the gated delta rule: decay, predict with the decayed state, write, read. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 06.2: one token of the gated delta rule: decay, predict with the decayed state, write, read; read chapters/06_linear_attention/README.md, section \"The delta-rule family: one recurrence\"");
  // EXERCISE 06.2 ends
}

Tensor2 ut_transform_solve(const Tensor2& a, const Tensor1& beta, const Tensor2& w) {
  // EXERCISE 06.3 begins: the UT transform: the unit lower-triangular solve inside a chunk of the delta rule. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 06.3: the UT transform: the unit lower-triangular solve inside a chunk of the delta rule; read chapters/06_linear_attention/README.md, section \"Chunks: the WY form and the UT transform\"");
  // EXERCISE 06.3 ends
}

}  // namespace tvlab::student

// exercises/00_attention_basics/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: 7c8b1d4f97e403b0

#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/attention.hpp"
#include "tvlab/student/softmax.hpp"

namespace tvlab::student {

Tensor2 softmax(const Tensor2& x) {
  // EXERCISE 00.1 begins: the numerically stable row softmax. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 00.1: the numerically stable row softmax; read chapters/00_attention_basics/README.md, section \"Softmax, stably\"");
  // EXERCISE 00.1 ends
}

Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg) {
  // EXERCISE 00.2 begins: scaled dot-product attention with causal and explicit masks. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 00.2: scaled dot-product attention with causal and explicit masks; read chapters/00_attention_basics/README.md, section \"Scaled dot-product attention, loop by loop\"");
  // EXERCISE 00.2 ends
}

}  // namespace tvlab::student

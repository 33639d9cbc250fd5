// exercises/01_normalization/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: 1c73ad383e45934a

#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/ffn.hpp"
#include "tvlab/student/normalization.hpp"

namespace tvlab::student {

Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps) {
  // EXERCISE 01.1 begins: RMSNorm forward. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 01.1: RMSNorm forward; read chapters/01_normalization/README.md, section \"RMSNorm\"");
  // EXERCISE 01.1 ends
}

RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  // EXERCISE 01.2 begins: RMSNorm backward (dx and dgamma). Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 01.2: RMSNorm backward (dx and dgamma); read chapters/01_normalization/README.md, section \"The backward pass of RMSNorm\"");
  // EXERCISE 01.2 ends
}

Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w) {
  // EXERCISE 01.3 begins: the SwiGLU feed-forward network. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 01.3: the SwiGLU feed-forward network; read chapters/01_normalization/README.md, section \"SwiGLU\"");
  // EXERCISE 01.3 ends
}

}  // namespace tvlab::student

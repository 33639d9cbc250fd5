// exercises/_template/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: e78006fb6cbe649d

#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"
#include "tvlab/student/example.hpp"

namespace tvlab::student {

Tensor2 example_softmax(const Tensor2& x) {
  // EXERCISE 99.1 begins: the row softmax. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 99.1: the row softmax; read chapters/_template/README.md, section \"The example\"");
  // EXERCISE 99.1 ends
}

}  // namespace tvlab::student

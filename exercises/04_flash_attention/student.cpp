// exercises/04_flash_attention/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: 93ee8a14e579c950

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/flash_attention.hpp"
#include "tvlab/student/io_model.hpp"
#include "tvlab/student/online_softmax.hpp"

namespace tvlab::student {

SoftmaxState online_softmax_merge(SoftmaxState a, SoftmaxState b) {
  // EXERCISE 04.1 begins: merge two online-softmax states. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 04.1: merge two online-softmax states; read chapters/04_flash_attention/README.md, section \"The online softmax\"");
  // EXERCISE 04.1 ends
}

FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  // EXERCISE 04.2 begins: flash attention's tiled forward pass. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 04.2: flash attention's tiled forward pass; read chapters/04_flash_attention/README.md, section \"Flash attention, forward\"");
  // EXERCISE 04.2 ends
}

analysis::FlashTiles best_flash_tiles(std::size_t n, std::size_t d, std::size_t sram_floats) {
  // EXERCISE 04.3 begins: the tile sizes that move the fewest elements. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 04.3: the tile sizes that move the fewest elements; read chapters/04_flash_attention/README.md, section \"The IO model\"");
  // EXERCISE 04.3 ends
}

}  // namespace tvlab::student

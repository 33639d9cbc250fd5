// exercises/08_quantization/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: 3357ee4e2d73cd55

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tvlab/core/dtype.hpp"
#include "tvlab/student/block_quant.hpp"
#include "tvlab/student/fp8.hpp"

namespace tvlab::student {

void quantize_block_q8_0(const float* x, std::uint8_t* block) {
  // EXERCISE 08.1 begins: one Q8_0 block: the scale d = max|x| / 127 in fp16, then 32 int8 codes round(x / d). Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 08.1: one Q8_0 block: the scale d = max|x| / 127 in fp16, then 32 int8 codes round(x / d); read chapters/08_quantization/README.md, section \"Q8_0: eight bits and one scale\"");
  // EXERCISE 08.1 ends
}

void quantize_block_q4_0(const float* x, std::uint8_t* block) {
  // EXERCISE 08.2 begins: one Q4_0 block: d = x_max / -8 from the signed element of largest magnitude, codes min(15, trunc(x / d + 8.5)), two per byte. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 08.2: one Q4_0 block: d = x_max / -8 from the signed element of largest magnitude, codes min(15, trunc(x / d + 8.5)), two per byte; read chapters/08_quantization/README.md, section \"Q4_0: four bits, packed in pairs\"");
  // EXERCISE 08.2 ends
}

std::uint8_t fp8_encode_e4m3(float x) {
  // EXERCISE 08.3 begins: the FP8 E4M3 encoder with round-to-nearest-even and saturation. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 08.3: the FP8 E4M3 encoder with round-to-nearest-even and saturation; read chapters/08_quantization/README.md, section \"FP8: E4M3 and E5M2\"");
  // EXERCISE 08.3 ends
}

}  // namespace tvlab::student

// exercises/02_position_encoding/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: 3a3c6fc1c379fa46

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/alibi.hpp"
#include "tvlab/student/rope.hpp"

namespace tvlab::student {

Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset) {
  // EXERCISE 02.1 begins: RoPE in both layouts. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 02.1: RoPE in both layouts; read chapters/02_position_encoding/README.md, section \"RoPE: rotating pairs\"");
  // EXERCISE 02.1 ends
}

RopeFrequencies rope_frequencies(const RopeConfig& cfg, long long seq_len) {
  // Exercise 02.3 covers the four classic types over whole heads; llama3, longrope and partial
  // rotation are left to ref::rope_frequencies.
  const std::string& type = cfg.rope_scaling.rope_type;
  require(type != "llama3" && type != "longrope", "rope_frequencies", "rope_scaling.rope_type ('",
          type, "') is not part of exercise 02.3 (default, linear, dynamic, yarn)");
  require(cfg.partial_rotary_factor == 1.0, "rope_frequencies", "partial_rotary_factor (", cfg.partial_rotary_factor,
          ") other than 1 is not part of exercise 02.3");
  // EXERCISE 02.3 begins: inverse frequencies: default, linear, dynamic, yarn. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 02.3: inverse frequencies: default, linear, dynamic, yarn; read chapters/02_position_encoding/README.md, section \"Context extension: PI, NTK-aware, dynamic NTK, YaRN\"");
  // EXERCISE 02.3 ends
}

Tensor3 alibi_bias(int num_heads, long long seq_q, long long seq_k, AlibiMode mode) {
  // EXERCISE 02.2 begins: ALiBi slopes and bias. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 02.2: ALiBi slopes and bias; read chapters/02_position_encoding/README.md, section \"ALiBi\"");
  // EXERCISE 02.2 ends
}

}  // namespace tvlab::student

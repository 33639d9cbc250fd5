// exercises/05_kv_cache/student.cpp: your code for this chapter's exercises (exercises.md).
// Write each exercise between its "EXERCISE NN.M begins" and "EXERCISE NN.M ends" lines, in
// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two
// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back
// (your version is saved beside this file as student.cpp.<date-time>.bak).
// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.
// stub fingerprint: b6a42e834b881c9d

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/gqa_decode.hpp"
#include "tvlab/student/mla_decode.hpp"
#include "tvlab/student/paged_kv_cache.hpp"

namespace tvlab::student {

GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale) {
  // EXERCISE 05.1 begins: one GQA decode step: query head i reads kv head floor(i / (h/g)). Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 05.1: one GQA decode step: query head i reads kv head floor(i / (h/g)); read chapters/05_kv_cache/README.md, section \"MHA → MQA → GQA: sharing key/value heads\"");
  // EXERCISE 05.1 ends
}

TokenSlot paged_append(PagedPool& pool, PagedSequence& seq, const Tensor2& k_t, const Tensor2& v_t) {
  // EXERCISE 05.2 begins: the paged append: block-table lookup and copy-on-write. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 05.2: the paged append: block-table lookup and copy-on-write; read chapters/05_kv_cache/README.md, section \"The paged cache\"");
  // EXERCISE 05.2 ends
}

Tensor2 mla_absorbed_scores(const Tensor2& q_nope, const Tensor2& q_rope, const Tensor2& w_uk, const Tensor2& latents,
                            const Tensor2& rope_keys, const MlaConfig& cfg) {
  // EXERCISE 05.3 begins: the absorbed MLA scores. Replace the throw with your code.
  throw tvlab::NotImplemented("exercise 05.3: the absorbed MLA scores; read chapters/05_kv_cache/README.md, section \"The absorbed decode: one wide shared head\"");
  // EXERCISE 05.3 ends
}

}  // namespace tvlab::student

#pragma once
// One case of the flash attention tests: shapes, the causal mask and the tile sizes.

#include <cstddef>
#include <string>

namespace tvlab::ch04 {

struct FlashCase {
  std::string label;
  std::size_t heads, seq_q, seq_k, head_dim, head_dim_v;
  bool causal;
  std::size_t block_q, block_k;
};

}  // namespace tvlab::ch04

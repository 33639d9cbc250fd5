#include "tvlab/core/linear_attention_config.hpp"

namespace tvlab {

std::string to_string(FeatureMap map) {
  switch (map) {
    case FeatureMap::elu_plus_one: return "elu_plus_one";
    case FeatureMap::relu: return "relu";
    case FeatureMap::identity: return "identity";
  }
  return "unknown";
}

LinearAttentionState::LinearAttentionState(std::size_t heads, std::size_t features, std::size_t value_dim)
    : s(xt::zeros<float>({heads, features, value_dim})), z(xt::zeros<float>({heads, features})) {}

}  // namespace tvlab

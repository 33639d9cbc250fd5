#include "tvlab/core/performer_config.hpp"

#include "tvlab/core/error.hpp"

namespace tvlab {

std::string to_string(RandomFeatureKind kind) {
  switch (kind) {
    case RandomFeatureKind::iid: return "iid";
    case RandomFeatureKind::orthogonal: return "orthogonal";
  }
  return "unknown";
}

std::string to_string(RowNorms norms) {
  switch (norms) {
    case RowNorms::chi: return "chi";
    case RowNorms::sqrt_d: return "sqrt_d";
  }
  return "unknown";
}

void validate_performer_features(const char* function, const PerformerFeatures& features) {
  require_nonempty(function, "features.w", features.w);
  require_finite(function, "features.w", features.w);
}

}  // namespace tvlab

#include "tvlab/core/tensor.hpp"

#include <sstream>

namespace tvlab {

std::string shape_string(const std::vector<std::size_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

}  // namespace tvlab

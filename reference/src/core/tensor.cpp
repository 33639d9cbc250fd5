#include "tvlab/core/tensor.hpp"

#include <sstream>

#include "tvlab/core/error.hpp"

namespace tvlab {

std::string shape_string(const std::vector<std::size_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::size_t checked_element_count(std::string_view function, std::initializer_list<std::size_t> shape) {
  std::size_t count = 1;
  for (const std::size_t extent : shape)
    if (__builtin_mul_overflow(count, extent, &count))
      fail(function, "a tensor of shape ", shape_string(std::vector<std::size_t>(shape)),
           " has more elements than memory can address");
  return count;
}

}  // namespace tvlab

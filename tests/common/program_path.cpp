#include "testing.hpp"

std::string& tvlab::testing::program_path() {
  static std::string path;
  return path;
}

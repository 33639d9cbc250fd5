// Test main of a chapter's exercise program: the chapter's suites over the student's code
// (exercises/NN_<topic>/student.cpp) alone.
#include <gtest/gtest.h>

#include "registry.hpp"
#include "testing.hpp"

bool tvlab::testing::exercise_program() { return true; }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tvlab::testing::program_path() = argc > 0 ? argv[0] : "test";
  return RUN_ALL_TESTS();
}

// Test main of a chapter's test program: prints which CUDA device (if any) the gpu cases run
// on, then runs every test over every backend of the chapter's registry.
#include <gtest/gtest.h>

#include <iostream>

#include "registry.hpp"
#include "testing.hpp"
#include "tvlab/cuda/runtime.hpp"

bool tvlab::testing::exercise_program() { return false; }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tvlab::testing::program_path() = argc > 0 ? argv[0] : "test";
  std::cout << "[ tvlab    ] CUDA: " << tvlab::cuda::device_description() << std::endl;
  return RUN_ALL_TESTS();
}

// Test main: prints which CUDA device (if any) the gpu cases run on, then runs every test.
#include <gtest/gtest.h>

#include <iostream>

#include "testing.hpp"
#include "tvlab/cuda/runtime.hpp"

std::string& tvlab::testing::program_path() {
  static std::string path;
  return path;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tvlab::testing::program_path() = argc > 0 ? argv[0] : "test";
  std::cout << "[ tvlab    ] CUDA: " << tvlab::cuda::device_description() << std::endl;
  return RUN_ALL_TESTS();
}

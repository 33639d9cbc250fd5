// Test main: prints which CUDA device (if any) the gpu cases run on, then runs every test.
#include <gtest/gtest.h>

#include <iostream>

#include "tvlab/cuda/runtime.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::cout << "[ tvlab    ] CUDA: " << tvlab::cuda::device_description() << std::endl;
  return RUN_ALL_TESTS();
}

// The CUDA runtime behind runtime.hpp: device queries, memory, copies, kernel timing.

#include <dlfcn.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "check.cuh"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {

bool device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

namespace {

// Why there is no device, in words that are true: the runtime reports "driver version is
// insufficient" both when the driver is too old and when there is no driver at all.
std::string why_no_device(cudaError_t status) {
  if (status == cudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY);
    if (!driver) return "no CUDA device: no NVIDIA driver is installed (libcuda.so.1 not found)";
    dlclose(driver);
    int driver_version = 0, runtime_version = 0;
    cudaDriverGetVersion(&driver_version);
    cudaRuntimeGetVersion(&runtime_version);
    return "no CUDA device: the NVIDIA driver supports CUDA " + std::to_string(driver_version / 1000) + "." +
           std::to_string(driver_version % 1000 / 10) + ", older than this build's CUDA runtime " +
           std::to_string(runtime_version / 1000) + "." + std::to_string(runtime_version % 1000 / 10);
  }
  if (status == cudaErrorNoDevice) return "no CUDA device (the driver finds no GPU)";
  return std::string("no CUDA device: ") + cudaGetErrorString(status);
}

}  // namespace

std::string device_description() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return why_no_device(status);
  if (count == 0) return "no CUDA device";
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

namespace device {

int compute_capability() {
  int device = 0, major = 0, minor = 0;
  TVLAB_CUDA_CHECK(cudaGetDevice(&device));
  TVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

std::size_t max_shared_bytes_per_block() {
  int device = 0, bytes = 0;
  TVLAB_CUDA_CHECK(cudaGetDevice(&device));
  TVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<std::size_t>(bytes);
}

void* malloc_bytes(std::size_t bytes) {
  void* ptr = nullptr;
  TVLAB_CUDA_CHECK(cudaMalloc(&ptr, bytes));
  return ptr;
}
void free_bytes(void* ptr) noexcept {
  if (ptr) cudaFree(ptr);
}
void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  TVLAB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  TVLAB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void fill_bytes(void* dst, int value, std::size_t bytes) { TVLAB_CUDA_CHECK(cudaMemset(dst, value, bytes)); }
void synchronize() { TVLAB_CUDA_CHECK(cudaDeviceSynchronize()); }

double time_kernel_ms(void (*work)(void*), void* context, int repeats) {
  if (repeats <= 0) throw std::invalid_argument("time_kernel_ms: repeats (" + std::to_string(repeats) + ") must be positive");
  static void* flush_buffer = nullptr;
  constexpr std::size_t kFlushBytes = std::size_t{256} << 20;  // larger than any current L2 (H100/H200: 50 MiB)
  if (!flush_buffer) TVLAB_CUDA_CHECK(cudaMalloc(&flush_buffer, kFlushBytes));
  cudaEvent_t start, stop;
  TVLAB_CUDA_CHECK(cudaEventCreate(&start));
  TVLAB_CUDA_CHECK(cudaEventCreate(&stop));
  work(context);  // warm-up (cuBLAS heuristics, lazy module loading)
  std::vector<float> times;
  for (int r = 0; r < repeats; ++r) {
    TVLAB_CUDA_CHECK(cudaMemset(flush_buffer, r, kFlushBytes));
    TVLAB_CUDA_CHECK(cudaEventRecord(start));
    work(context);
    TVLAB_CUDA_CHECK(cudaEventRecord(stop));
    TVLAB_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    TVLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

}  // namespace device
}  // namespace tvlab::cuda

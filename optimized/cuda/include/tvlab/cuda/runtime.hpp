#pragma once
/// @file
/// The CUDA runtime as the rest of tvlab sees it: is there a device and what can it do, device
/// memory and copies, kernel timing. The generic device helpers live here and in `blas.hpp`
/// (SGEMM through cuBLAS), not in the topic files. This header has no xtensor and no CUDA
/// headers, so `.cu` files and plain C++ both include it. Without nvcc the same functions come
/// from `cuda/no_cuda/runtime.cpp`: `device_available()` is false and everything else throws
/// "built without CUDA".

#include <cstddef>
#include <string>
#include <utility>

namespace tvlab::cuda {

/// True when tvlab was built with CUDA and a device can be used.
bool device_available();
/// "NVIDIA H200 (sm_90, 139 GiB)", or why there is no device.
std::string device_description();

namespace device {

/// The current device's compute capability as major * 10 + minor (90 for H100 / H200).
int compute_capability();
/// The most shared memory one thread block may use on the current device, in bytes (with the
/// opt-in beyond 48 KiB that the kernels request: 227 KiB on sm_90).
std::size_t max_shared_bytes_per_block();

void* malloc_bytes(std::size_t bytes);
void free_bytes(void* ptr) noexcept;
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
void fill_bytes(void* dst, int value, std::size_t bytes);
void synchronize();

/// Times `work` with CUDA events: one warm-up call, then `repeats` calls, each after an L2
/// flush (a 256 MiB memset), so every repeat reads its inputs from HBM. Returns the median in ms.
double time_kernel_ms(void (*work)(void*), void* context, int repeats = 10);

}  // namespace device

/// Owning device array of `count` elements of T (RAII over cudaMalloc / cudaFree).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count)
      : ptr_(static_cast<T*>(count ? device::malloc_bytes(count * sizeof(T)) : nullptr)), count_(count) {}
  DeviceBuffer(const T* host, std::size_t count) : DeviceBuffer(count) { upload(host); }
  ~DeviceBuffer() { device::free_bytes(ptr_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(count_, other.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const T* host) {
    if (count_) device::copy_to_device(ptr_, host, count_ * sizeof(T));
  }
  void download(T* host) const {
    if (count_) device::copy_to_host(host, ptr_, count_ * sizeof(T));
  }
  T* get() const { return ptr_; }
  std::size_t size() const { return count_; }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace tvlab::cuda

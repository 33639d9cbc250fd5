// Heap accounting for the benchmark programs: every operator new of the program goes through
// these counters (see bench_memory.hpp).

#include "bench_memory.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<long long> heap_now{0}, heap_peak{0};

void* counted_alloc(std::size_t size) {
  void* p = std::malloc(size ? size : 1);
  if (!p) throw std::bad_alloc();
  const long long now = heap_now += static_cast<long long>(malloc_usable_size(p));
  long long peak = heap_peak.load();
  while (now > peak && !heap_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void counted_free(void* p) noexcept {
  if (!p) return;
  heap_now -= static_cast<long long>(malloc_usable_size(p));
  std::free(p);
}

}  // namespace

void* operator new(std::size_t size) { return counted_alloc(size); }
void* operator new[](std::size_t size) { return counted_alloc(size); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

namespace tvlab::bench {

double peak_extra_heap_bytes(const std::function<void()>& call) {
  const long long before = heap_now.load();
  heap_peak = before;
  call();
  return static_cast<double>(heap_peak.load() - before);
}

}  // namespace tvlab::bench

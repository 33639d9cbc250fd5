#include "tvlab/core/rng.hpp"

#include <cmath>

namespace tvlab {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): spreads one 64-bit seed over the xoshiro state.
std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(std::uint64_t seed) {
  for (auto& word : state_) word = splitmix64(seed);
}

// xoshiro256** (Blackman & Vigna 2018).
std::uint64_t Rng::next_u64() {
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

// Marsaglia polar method: draw (u, v) uniformly in the unit disc, s = u^2 + v^2, then
// u * sqrt(-2 ln s / s) and v * sqrt(-2 ln s / s) are two independent N(0, 1) samples.
// Only sqrt (exact in IEEE 754) and log are used, so results agree across platforms.
double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u = 0.0, v = 0.0, s = 0.0;
  do {
    u = uniform(-1.0, 1.0);
    v = uniform(-1.0, 1.0);
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double factor = std::sqrt(-2.0 * std::log(s) / s);
  spare_ = v * factor;
  has_spare_ = true;
  return u * factor;
}

Tensor1 Rng::normal_vector(std::size_t n, double mean, double stddev) {
  Tensor1 t = Tensor1::from_shape({n});
  for (auto& x : t) x = static_cast<float>(mean + stddev * normal());
  return t;
}

Tensor2 Rng::normal_matrix(std::size_t rows, std::size_t cols, double mean, double stddev) {
  checked_element_count("Rng::normal_matrix", {rows, cols});
  Tensor2 t = Tensor2::from_shape({rows, cols});
  for (auto& x : t) x = static_cast<float>(mean + stddev * normal());
  return t;
}

DTensor2 Rng::normal_dmatrix(std::size_t rows, std::size_t cols, double mean, double stddev) {
  checked_element_count("Rng::normal_dmatrix", {rows, cols});
  DTensor2 t = DTensor2::from_shape({rows, cols});
  for (auto& x : t) x = mean + stddev * normal();
  return t;
}

Tensor3 Rng::normal_tensor(std::size_t a, std::size_t b, std::size_t c, double mean, double stddev) {
  checked_element_count("Rng::normal_tensor", {a, b, c});
  Tensor3 t = Tensor3::from_shape({a, b, c});
  for (auto& x : t) x = static_cast<float>(mean + stddev * normal());
  return t;
}

}  // namespace tvlab

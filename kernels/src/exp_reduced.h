// e^x in plain float operations, shared by the swiglu epilogue and attention's softmax so
// both vectorize at every ISA's width and round the same way on each.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace clika_kernels {

// e^x for x clamped to [-87, 88] (beyond: e^x under a normal float, or a silu product
// that has reached its limit). n = round(x / ln 2) by the 1.5 * 2^23 trick, which also
// leaves n in the sum's low mantissa bits; r = x - n ln 2 in two parts (Cody-Waite), so
// |r| <= ln 2 / 2 and the polynomial (Cephes' expf coefficients) holds its error there.
__attribute__((always_inline)) inline float exp_reduced(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t bits;
  std::memcpy(&bits, &shifted, 4);
  const uint32_t scale_bits = (bits - 0x4b400000u + 127u) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &scale_bits, 4);
  return p * scale;
}

}  // namespace clika_kernels

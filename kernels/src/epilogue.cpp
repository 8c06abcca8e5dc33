#include "epilogue.h"

#include <algorithm>
#include <cstring>

namespace clika_kernels {
namespace {

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

// One loop the compiler vectorizes at each target's width (the build's -fno-trapping-math
// lets it turn the clamp into min/max); the operations per element stay the same.
__attribute__((always_inline)) inline void swiglu_span(const float* __restrict gate, const float* __restrict up,
                                                       float* __restrict y, int64_t count) {
  for (int64_t j = 0; j < count; ++j) y[j] = gate[j] / (1.0f + exp_reduced(-gate[j])) * up[j];
}

void swiglu_baseline(const float* gate, const float* up, float* y, int64_t count) {
  swiglu_span(gate, up, y, count);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void swiglu_avx2(const float* gate, const float* up, float* y, int64_t count) {
  swiglu_span(gate, up, y, count);
}

__attribute__((target("avx512f"))) void swiglu_avx512(const float* gate, const float* up, float* y,
                                                      int64_t count) {
  swiglu_span(gate, up, y, count);
}
#endif

using SpanFn = void (*)(const float*, const float*, float*, int64_t);

SpanFn span_for(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kAvx2: return swiglu_avx2;
    case Isa::kAvx512:
    case Isa::kAvx512Vnni:
    case Isa::kAvx512Bf16: return swiglu_avx512;
    default: return swiglu_baseline;
  }
#else
  (void)isa;
  return swiglu_baseline;  // aarch64's baseline is NEON
#endif
}

}  // namespace

void swiglu_rows(const float* full, int64_t full_stride, int64_t half, float* y, int64_t m, Isa isa) {
  const SpanFn span = span_for(isa);
  for (int64_t r = 0; r < m; ++r) span(full + r * full_stride, full + r * full_stride + half, y + r * half, half);
}

}  // namespace clika_kernels

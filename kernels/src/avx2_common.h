// What the AVX2 engines (avx2_fp32.cpp, avx2_int8.cpp) share: the horizontal sums and the
// scale decoding (every format is read in place, by the walks of avx2_pieces.h).
// Included after each engine's target options.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <limits>

#include "formats.h"
#include "kernel_api.h"

namespace clika_kernels {
namespace {

inline float reduce256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // F16C: exact for every input, subnormals included
}

// The 8 six-bit scales and mins of a Q4_K / Q5_K super-block (12 bytes, as k_scale_min
// unpacks them one by one) in two 64-bit words, one byte each, with 32-bit mask arithmetic.
inline void k_scales_and_mins(const uint8_t* packed, uint64_t* scales, uint64_t* mins) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t six = 0x3f3f3f3fu, four = 0x0f0f0f0fu, two = 0x03030303u;
  const uint32_t scales_hi = (w[2] & four) | (((w[0] >> 6) & two) << 4);
  const uint32_t mins_hi = ((w[2] >> 4) & four) | (((w[1] >> 6) & two) << 4);
  *scales = (w[0] & six) | static_cast<uint64_t>(scales_hi) << 32;
  *mins = (w[1] & six) | static_cast<uint64_t>(mins_hi) << 32;
}

// A type with a block layout but no AVX2 walk: run_matmul refuses types without a layout
// before any kernel runs, and every laid-out type has a walk, so this is reached only by a
// format added to formats.h without one. Its outputs are NaN, which the kernel tests (every
// format on every ISA against gguf-py) report, rather than zeros that look like a result.
inline void unwalked_rows(const Problem& p, int64_t n0, int64_t n1) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t m = 0; m < p.m; ++m)
    for (int64_t n = n0; n < n1; ++n) p.y[m * p.n + n] = nan;
}

}  // namespace
}  // namespace clika_kernels

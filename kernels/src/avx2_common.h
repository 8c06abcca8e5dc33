// What the AVX2 engines (avx2_fp32.cpp, avx2_int8.cpp) share: the horizontal sums, the
// scale decoding, and the walk of the formats without a direct walk (Q5_1, Q5_K:
// each weight row decoded once by formats.h, then read by every tile of activation rows).
// Included after each engine's target options.
#pragma once

#include <immintrin.h>

#include <cstring>

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

// sum_g bias16[g] * sums[g] over a row's 16-groups, in one fixed order.
inline float avx2_bias_dot(const float* bias16, const float* sums, int64_t groups) {
  __m256 acc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(bias16 + g), _mm256_loadu_ps(sums + g), acc);
  float tail = 0.0f;
  for (; g < groups; ++g) tail += bias16[g] * sums[g];
  return reduce256(acc) + tail;
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

template <class Engine, int R>
inline void avx2_tile(const Problem& p, const Activations& x, const RowScratch& s, int64_t n, int64_t m0) {
  float out[R];
  Engine::template dot<R>(p, x, s, m0, out);
  for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n] = out[r];
}

// Engine: template <int R> static void dot(const Problem&, const Activations&,
//                                          const RowScratch&, int64_t m0, float* out)
// computes activation rows m0..m0+R-1 (R <= 4) of the weight row decoded in the scratch,
// each row with dot<1>'s operations.
template <class Engine>
inline void avx2_rows_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    decode_row(p.type, p.b + n * p.row_bytes, p.k, s.codes, s.scale16, s.bias16);
    int64_t m = 0;
    for (; m + 4 <= p.m; m += 4) avx2_tile<Engine, 4>(p, x, s, n, m);
    switch (p.m - m) {
      case 3: avx2_tile<Engine, 3>(p, x, s, n, m); break;
      case 2: avx2_tile<Engine, 2>(p, x, s, n, m); break;
      case 1: avx2_tile<Engine, 1>(p, x, s, n, m); break;
      default: break;
    }
  }
}

}  // namespace
}  // namespace clika_kernels

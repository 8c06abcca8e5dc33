// StepAttention's two inner loops in AVX2, with the portable loops' exact operations: a
// key's 16 lane sums are two 8-float halves, halved by the same tree (8 keys at once,
// transposed as they are halved), and the weighted values add in key order. So this path's
// bits are the portable path's (attention_math.h). GCC's own vectorization of the portable
// loops at this width ran slower than the SSE2 baseline.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "attention.h"
#include "attention_math.h"

#pragma GCC target("avx2")

#include "attention_tiles.h"

namespace clika_kernels {
namespace {

using attention_math::kLanes;

// dot(q, key i) for 8 consecutive keys, key i in lane i.
[[gnu::always_inline]] inline __m256 eight_dots(const float* q, const float* keys, int64_t head_dim) {
  // Lanes 0-7 and 8-15 of each key's 16 lane sums, piece by piece, 8 keys side by side.
  __m256 lo[8], hi[8];
  const __m256 q_lo = _mm256_loadu_ps(q), q_hi = _mm256_loadu_ps(q + 8);
  for (int i = 0; i < 8; ++i) {
    lo[i] = _mm256_mul_ps(q_lo, _mm256_loadu_ps(keys + i * head_dim));
    hi[i] = _mm256_mul_ps(q_hi, _mm256_loadu_ps(keys + i * head_dim + 8));
  }
  for (int64_t c = kLanes; c < head_dim; c += kLanes) {
    const __m256 a = _mm256_loadu_ps(q + c), b = _mm256_loadu_ps(q + c + 8);
    for (int i = 0; i < 8; ++i) {
      lo[i] = _mm256_add_ps(lo[i], _mm256_mul_ps(a, _mm256_loadu_ps(keys + i * head_dim + c)));
      hi[i] = _mm256_add_ps(hi[i], _mm256_mul_ps(b, _mm256_loadu_ps(keys + i * head_dim + c + 8)));
    }
  }
  __m256 eights[8];  // lanes l + (l + 8)
  for (int i = 0; i < 8; ++i) eights[i] = _mm256_add_ps(lo[i], hi[i]);
  __m256 fours[4];  // keys 2i, 2i+1 in the two 128-bit halves: l + (l + 4)
  for (int i = 0; i < 4; ++i) {
    fours[i] = _mm256_add_ps(_mm256_permute2f128_ps(eights[2 * i], eights[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(eights[2 * i], eights[2 * i + 1], 0x31));
  }
  __m256 twos[2];  // half h: keys 4i + h (elements 0, 1) and 4i + 2 + h (2, 3): l + (l + 2)
  for (int i = 0; i < 2; ++i) {
    twos[i] = _mm256_add_ps(_mm256_shuffle_ps(fours[2 * i], fours[2 * i + 1], 0x44),
                            _mm256_shuffle_ps(fours[2 * i], fours[2 * i + 1], 0xee));
  }
  // l + (l + 1): half h, element j holds key 2j + h.
  const __m256 sums = _mm256_add_ps(_mm256_shuffle_ps(twos[0], twos[1], 0x88), _mm256_shuffle_ps(twos[0], twos[1], 0xdd));
  return _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Up to 4 heads x 16 dims of weighted values in registers, keys in order.
template <int G>
[[gnu::always_inline]] inline void value_tile(const float* weights, int64_t stride, const float* values,
                                              int64_t count, int64_t head_dim, int64_t d0, float* out) {
  __m256 acc[G][2];
  for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
  for (int64_t j = 0; j < count; ++j) {
    const float* v = values + j * head_dim + d0;
    const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
    for (int g = 0; g < G; ++g) {
      const __m256 w = _mm256_set1_ps(weights[g * stride + j]);
      acc[g][0] = _mm256_add_ps(acc[g][0], _mm256_mul_ps(w, v0));
      acc[g][1] = _mm256_add_ps(acc[g][1], _mm256_mul_ps(w, v1));
    }
  }
  for (int g = 0; g < G; ++g) {
    _mm256_storeu_ps(out + g * head_dim + d0, acc[g][0]);
    _mm256_storeu_ps(out + g * head_dim + d0 + 8, acc[g][1]);
  }
}

struct Avx2Dots {
  static constexpr int kKeys = 8;
  [[gnu::always_inline]] static void store(const float* q, const float* keys, int64_t head_dim, float* out) {
    _mm256_storeu_ps(out, eight_dots(q, keys, head_dim));
  }
};

template <int G>
struct Avx2ValueTile {
  static constexpr int64_t kDims = 16;
  [[gnu::always_inline]] static void run(const float* w, int64_t stride, const float* rows, int64_t count,
                                         int64_t head_dim, int64_t d0, float* out) {
    value_tile<G>(w, stride, rows, count, head_dim, d0, out);
  }
};

struct Avx2Loops {
  static void scores(const float* queries, int group, const float* keys, int64_t first, int64_t count,
                     int64_t head_dim, float* scores, int64_t stride) {
    attention_math::scores_in_blocks<Avx2Dots>(queries, group, keys, first, count, head_dim, scores, stride);
  }

  static void values(const float* weights, int group, const float* values, int64_t first, int64_t count,
                     int64_t head_dim, int64_t stride, float* out) {
    attention_math::values_in_tiles<Avx2ValueTile>(weights, group, values, first, count, head_dim, stride, out);
  }
};

}  // namespace

void attend_avx2(const AttentionTask& task, const AttentionShape& s, float* scratch) {
  attention_math::attend<Avx2Loops>(task, s, scratch);
}

}  // namespace clika_kernels
#endif

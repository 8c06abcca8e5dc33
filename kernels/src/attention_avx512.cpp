// StepAttention's two inner loops in AVX-512, with the portable loops' exact operations:
// a key's 16 lane sums are halved by the same tree (here 16 keys at once, transposed as
// they are halved), and the weighted values add in key order. So this path's bits are
// the portable path's (attention_math.h).
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "attention.h"
#include "attention_math.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

#include "attention_tiles.h"

namespace clika_kernels {
namespace {

using attention_math::kLanes;

// dot(q, key i) for 16 consecutive keys, key i in lane i. Each halving step (lanes l and
// l + 8, then l + 4, l + 2, l + 1) is done for all keys with one add per pair of vectors.
[[gnu::always_inline]] inline __m512 sixteen_dots(const float* q, const float* keys, int64_t head_dim) {
  // Key i's 16 lane sums of q * k over the head, piece by piece as dot() forms them; the
  // 16 keys' sums advance together (16 independent chains, not one chain per key).
  __m512 v[16];
  const __m512 q0 = _mm512_loadu_ps(q);
  for (int i = 0; i < 16; ++i) v[i] = _mm512_mul_ps(q0, _mm512_loadu_ps(keys + i * head_dim));
  for (int64_t c = kLanes; c < head_dim; c += kLanes) {
    const __m512 qc = _mm512_loadu_ps(q + c);
    for (int i = 0; i < 16; ++i) v[i] = _mm512_add_ps(v[i], _mm512_mul_ps(qc, _mm512_loadu_ps(keys + i * head_dim + c)));
  }
  __m512 halves[8];  // keys 2i, 2i+1: 8 lanes each
  for (int i = 0; i < 8; ++i) {
    halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
  }
  __m512 quarters[4];  // keys 4i + q in quarter q: 4 lanes each
  for (int i = 0; i < 4; ++i) {
    quarters[i] = _mm512_add_ps(_mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0x88),
                                _mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0xdd));
  }
  __m512 pairs[2];  // quarter q: keys 8i + q (elements 0, 1) and 8i + 4 + q (2, 3)
  for (int i = 0; i < 2; ++i) {
    pairs[i] = _mm512_add_ps(_mm512_shuffle_ps(quarters[2 * i], quarters[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(quarters[2 * i], quarters[2 * i + 1], 0xee));
  }
  // Lane 4q + r now holds key 4r + q.
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(pairs[0], pairs[1], 0x88),
                                    _mm512_shuffle_ps(pairs[0], pairs[1], 0xdd));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, sums);
}

// Up to 4 heads x 64 dims of weighted values in registers, keys in order.
template <int G>
[[gnu::always_inline]] inline void value_tile(const float* weights, int64_t stride, const float* values,
                                              int64_t count, int64_t head_dim, int64_t d0, int pieces,
                                              float* out) {
  __m512 acc[G][4];
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < 4; ++c) acc[g][c] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < count; ++j) {
    const float* v = values + j * head_dim + d0;
    __m512 vj[4];
    for (int c = 0; c < 4; ++c) vj[c] = c < pieces ? _mm512_loadu_ps(v + c * kLanes) : _mm512_setzero_ps();
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(weights[g * stride + j]);
      for (int c = 0; c < 4; ++c) acc[g][c] = _mm512_add_ps(acc[g][c], _mm512_mul_ps(w, vj[c]));
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < pieces; ++c) _mm512_storeu_ps(out + g * head_dim + d0 + c * kLanes, acc[g][c]);
  }
}

struct Avx512Dots {
  static constexpr int kKeys = 16;
  [[gnu::always_inline]] static void store(const float* q, const float* keys, int64_t head_dim, float* out) {
    _mm512_storeu_ps(out, sixteen_dots(q, keys, head_dim));
  }
};

template <int G>
struct Avx512ValueTile {
  static constexpr int64_t kDims = 64;
  [[gnu::always_inline]] static void run(const float* w, int64_t stride, const float* rows, int64_t count,
                                         int64_t head_dim, int64_t d0, float* out) {
    const int pieces = static_cast<int>(std::min<int64_t>(4, (head_dim - d0) / kLanes));
    value_tile<G>(w, stride, rows, count, head_dim, d0, pieces, out);
  }
};

struct Avx512Loops {
  static void scores(const float* queries, int group, const float* keys, int64_t first, int64_t count,
                     int64_t head_dim, float* scores, int64_t stride) {
    attention_math::scores_in_blocks<Avx512Dots>(queries, group, keys, first, count, head_dim, scores, stride);
  }

  static void values(const float* weights, int group, const float* values, int64_t first, int64_t count,
                     int64_t head_dim, int64_t stride, float* out) {
    attention_math::values_in_tiles<Avx512ValueTile>(weights, group, values, first, count, head_dim, stride, out);
  }
};

}  // namespace

void attend_avx512(const AttentionTask& task, const AttentionShape& s, float* scratch) {
  attention_math::attend<Avx512Loops>(task, s, scratch);
}

}  // namespace clika_kernels
#endif

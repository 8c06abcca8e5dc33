// The AVX-512 fp32 engine's final sums, 8 outputs at a time.
// Included by avx512_fp32.cpp after its target options, so it compiles for that ISA.
#pragma once

#include <algorithm>

#include "avx512_rows.h"

namespace clika_kernels {
namespace {

// The sums of up to 8 (a, b) accumulator pairs, each reduce_pair(a, b) (GCC's
// _mm512_reduce_add_ps tree: halves of 256, of 128, lanes (0, 2) and (1, 3), then the pair)
// on 8 vectors at once, so the same bits; out[i] is pair i's. One by one, the reductions
// cost a 64-row prefill of Q4_1 576x3072 10% of its time (5.17 against 4.67 ms, one thread).
[[gnu::always_inline]] inline void reduce_pairs(const __m512* a, const __m512* b, int count, float* out) {
  __m512 v[8];
  for (int i = 0; i < 8; ++i) v[i] = i < count ? _mm512_add_ps(a[i], b[i]) : _mm512_setzero_ps();
  __m512 s[4];
  for (int i = 0; i < 4; ++i) {
    const __m512 lo = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44);
    const __m512 hi = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee);
    s[i] = _mm512_add_ps(hi, lo);
  }
  __m512 u[2];
  for (int i = 0; i < 2; ++i) {
    const __m512 lo = _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88);
    const __m512 hi = _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xdd);
    u[i] = _mm512_add_ps(hi, lo);
  }
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x44), _mm512_shuffle_ps(u[0], u[1], 0xee));
  const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(z, z, 0x88), _mm512_shuffle_ps(z, z, 0xdd));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, f);
  // Lane 4i holds v[i]'s sum, lane 4i + 1 v[4 + i]'s.
  for (int i = 0; i < count; ++i) out[i] = lanes[i < 4 ? 4 * i : 4 * (i - 4) + 1];
}

// Outputs (n + w, m0 + r) = reduce_pair(first[w][r], second[w][r]), 8 at a time.
template <int NW, int R>
[[gnu::always_inline]] inline void store_pairs(const Problem& p, int64_t n, int64_t m0, const __m512 (&first)[NW][R],
                                               const __m512 (&second)[NW][R]) {
  constexpr int kCount = NW * R;
  for (int i0 = 0; i0 < kCount; i0 += 8) {
    const int count = std::min(8, kCount - i0);
    __m512 a[8], b[8];
    for (int i = 0; i < count; ++i) {
      a[i] = first[(i0 + i) / R][(i0 + i) % R];
      b[i] = second[(i0 + i) / R][(i0 + i) % R];
    }
    float out[8];
    reduce_pairs(a, b, count, out);
    for (int i = 0; i < count; ++i) p.y[(m0 + (i0 + i) % R) * p.n + n + (i0 + i) / R] = out[i];
  }
}

}  // namespace
}  // namespace clika_kernels

// AVX-512 fp32 engine, weights decoded in registers: each 16-group of a chunk's codes is
// widened to fp32 and made a weight with one FMA (code * scale + bias, as decode_row
// defines it), then multiplied into every activation row with one FMA each. The 4-bit
// formats look their weights up instead: a 16-entry table of code * scale + bias per
// group (the same FMA, once per code value) indexed by the nibbles in place (vpermps
// reads the low 4 bits of each lane), so a weight costs a lookup, not a widen and convert.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

#include "avx512_rows.h"

namespace clika_kernels {
namespace {

template <int J>
inline __m512 group_weights(__m512i codes, const float* scale4, const float* bias4) {
  const __m512 c = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(codes, J)));
  return _mm512_fmadd_ps(c, _mm512_set1_ps(scale4[J]), _mm512_set1_ps(bias4[J]));
}

template <int R>
struct Fp32Rows {
  const float* a[R];
  __m512 acc[R][2];

  Fp32Rows(const Problem& p, const Activations& x, int64_t m0) {
    for (int r = 0; r < R; ++r) {
      a[r] = x.a + (m0 + r) * p.k;
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    }
  }

  void unit(int64_t, int, const float*, const float*) {}

  template <int J>
  void group(__m512i codes, int64_t k, const float* scale4, const float* bias4) {
    const __m512 w = group_weights<J>(codes, scale4, bias4);
    for (int r = 0; r < R; ++r) acc[r][J & 1] = _mm512_fmadd_ps(w, _mm512_loadu_ps(a[r] + k + 16 * J), acc[r][J & 1]);
  }

  void chunk(__m512i codes, const uint8_t*, int64_t k, int c, bool half, const float* scale16, const float* bias16) {
    const float* scale4 = scale16 + 4 * c;
    const float* bias4 = bias16 + 4 * c;
    group<0>(codes, k, scale4, bias4);
    group<1>(codes, k, scale4, bias4);
    if (half) return;
    group<2>(codes, k, scale4, bias4);
    group<3>(codes, k, scale4, bias4);
  }

  void finish(float* out) {
    for (int r = 0; r < R; ++r) out[r] = reduce_pair(acc[r][0], acc[r][1]);
  }
};

// The table of group g: code * scale + bias for every code 0..15.
inline __m512 group_table(const float* scale16, const float* bias16, int g) {
  const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_fmadd_ps(codes, _mm512_set1_ps(scale16[g]), _mm512_set1_ps(bias16[g]));
}

template <class Format, int R>
struct NibbleRows {
  const float* a[R];
  __m512 acc[R][2];

  NibbleRows(const Problem& p, const Activations& x, int64_t m0) {
    for (int r = 0; r < R; ++r) {
      a[r] = x.a + (m0 + r) * p.k;
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    }
  }

  template <int I>
  void group(__m512i nibbles, int64_t k, int c, const float* scale16, const float* bias16) {
    const int g = Format::kRunGroups[I];
    const __m512 w = _mm512_permutexvar_ps(nibbles, group_table(scale16, bias16, 4 * c + g));
    for (int r = 0; r < R; ++r) acc[r][I & 1] = _mm512_fmadd_ps(w, _mm512_loadu_ps(a[r] + k + 16 * g), acc[r][I & 1]);
  }

  void run(const uint8_t* unit, int64_t k, int c, int i, const float* scale16, const float* bias16) {
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Format::run(unit, c, i))));
    if (i == 0) {
      group<0>(q, k, c, scale16, bias16);
      group<1>(_mm512_srli_epi32(q, 4), k, c, scale16, bias16);
    } else {
      group<2>(q, k, c, scale16, bias16);
      group<3>(_mm512_srli_epi32(q, 4), k, c, scale16, bias16);
    }
  }

  void unit(int64_t, int, const float*, const float*) {}

  void chunk(__m512i, const uint8_t* unit, int64_t k, int c, bool half, const float* scale16, const float* bias16) {
    run(unit, k, c, 0, scale16, bias16);
    if (!half) run(unit, k, c, 1, scale16, bias16);
  }

  void finish(float* out) {
    for (int r = 0; r < R; ++r) out[r] = reduce_pair(acc[r][0], acc[r][1]);
  }
};

template <int R>
using Q4_0Nibbles = NibbleRows<Q4_0Blocks, R>;
template <int R>
using Q4_1Nibbles = NibbleRows<Q4_1Blocks, R>;
template <int R>
using Q4_KNibbles = NibbleRows<Q4_KBlocks, R>;

}  // namespace

void avx512_fp32_range(const Problem& p, const Activations& x, const RowScratch&, int64_t n0, int64_t n1) {
  if (p.type == kQ4_0) return rows_range<Q4_0Blocks, Q4_0Nibbles>(p, x, n0, n1);
  if (p.type == kQ4_1) return rows_range<Q4_1Blocks, Q4_1Nibbles>(p, x, n0, n1);
  if (p.type == kQ4_K) return rows_range<Q4_KBlocks, Q4_KNibbles>(p, x, n0, n1);
  run_by_format<Fp32Rows>(p, x, n0, n1);
}

}  // namespace clika_kernels
#endif

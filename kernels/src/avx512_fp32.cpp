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

  void chunk(__m512i codes, int64_t k, int c, bool half, const float* scale16, const float* bias16) {
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

  void walk(const uint8_t* row, int64_t k) {
    alignas(64) float scale16[kMaxUnitGroups];
    alignas(64) float bias16[kMaxUnitGroups];
    const int64_t blocks = k / Format::kWeights;
    for (int64_t b = 0; b < blocks; b += Format::kUnitBlocks) {
      const int count = static_cast<int>(std::min<int64_t>(Format::kUnitBlocks, blocks - b));
      const uint8_t* unit = row + b * Format::kBytes;
      const int64_t k0 = b * Format::kWeights;
      const int weights = count * Format::kWeights;
      Format::scales(unit, count, scale16, bias16);
      for (int c = 0; 64 * c < weights; ++c) {
        run(unit, k0 + 64 * c, c, 0, scale16, bias16);
        if (weights - 64 * c >= 64) run(unit, k0 + 64 * c, c, 1, scale16, bias16);
      }
    }
  }

  void finish(float* out) {
    for (int r = 0; r < R; ++r) out[r] = reduce_pair(acc[r][0], acc[r][1]);
  }
};

template <class Format, int R>
void nibble_tile(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
  NibbleRows<Format, R> rows(p, x, m0);
  rows.walk(p.b + n * p.row_bytes, p.k);
  float out[R];
  rows.finish(out);
  for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n] = out[r];
}

template <class Format>
void nibble_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    int64_t m = 0;
    for (; m + 4 <= p.m; m += 4) nibble_tile<Format, 4>(p, x, n, m);
    switch (p.m - m) {
      case 3: nibble_tile<Format, 3>(p, x, n, m); break;
      case 2: nibble_tile<Format, 2>(p, x, n, m); break;
      case 1: nibble_tile<Format, 1>(p, x, n, m); break;
      default: break;
    }
  }
}

}  // namespace

void avx512_fp32_range(const Problem& p, const Activations& x, const RowScratch&, int64_t n0, int64_t n1) {
  if (p.type == kQ4_0) return nibble_range<Q4_0Blocks>(p, x, n0, n1);
  if (p.type == kQ4_1) return nibble_range<Q4_1Blocks>(p, x, n0, n1);
  if (p.type == kQ4_K) return nibble_range<Q4_KBlocks>(p, x, n0, n1);
  run_by_format<Fp32Rows>(p, x, n0, n1);
}

}  // namespace clika_kernels
#endif

// AVX-512 fp32 engine: each stored row is expanded once to fp32 weights (one FMA per
// weight from its code, scale and bias, in L1), then dotted with every activation row.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

#include "avx512_common.h"
#include "row_loop.h"

namespace clika_kernels {
namespace {

struct Avx512Fp32 {
  static void prepare(const Problem& p, const RowScratch& s) {
    for (int64_t k = 0; k < p.k; k += 16) {
      const __m128i c8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.codes + k));
      const __m512 c = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c8));
      const __m512 w = _mm512_fmadd_ps(c, _mm512_set1_ps(s.scale16[k / 16]), _mm512_set1_ps(s.bias16[k / 16]));
      _mm512_storeu_ps(s.wf + k, w);
    }
  }

  // Four accumulators per row, chunk j of every 64 weights into accumulator j.
  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    __m512 acc[R][4];
    const float* a[R];
    for (int r = 0; r < R; ++r) {
      a[r] = x.a + (m0 + r) * p.k;
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 64 <= p.k; k += 64) {
      for (int j = 0; j < 4; ++j) {
        const __m512 w = _mm512_loadu_ps(s.wf + k + 16 * j);
        for (int r = 0; r < R; ++r) acc[r][j] = _mm512_fmadd_ps(w, _mm512_loadu_ps(a[r] + k + 16 * j), acc[r][j]);
      }
    }
    for (int j = 0; k < p.k; k += 16, ++j) {
      const __m512 w = _mm512_loadu_ps(s.wf + k);
      for (int r = 0; r < R; ++r) acc[r][j] = _mm512_fmadd_ps(w, _mm512_loadu_ps(a[r] + k), acc[r][j]);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
      out[r] = _mm512_reduce_add_ps(sum);
    }
  }
};

}  // namespace

void avx512_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_range<Avx512Fp32>(p, x, s, n0, n1);
}

}  // namespace clika_kernels
#endif

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

// Q4_1 and Q4_K rows expand straight from their bytes to fp32 weights, the nibbles widened
// in registers: no byte-code pass through memory. Each weight is the same
// fma(code, scale, bias) as Avx512Fp32::prepare, so the results are bit for bit the same.
inline void store_nibble_weights(const uint8_t* bytes16, float* low, float* high, float sl, float bl, float sh,
                                 float bh) {
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes16)));
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(15)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
  _mm512_storeu_ps(low, _mm512_fmadd_ps(lo, _mm512_set1_ps(sl), _mm512_set1_ps(bl)));
  _mm512_storeu_ps(high, _mm512_fmadd_ps(hi, _mm512_set1_ps(sh), _mm512_set1_ps(bh)));
}

void expand_q4_1(const uint8_t* row, int64_t k, float* wf) {
  for (int64_t i = 0; i < k / 32; ++i) {
    const uint8_t* b = row + i * 20;
    const float d = read_fp16(b), m = read_fp16(b + 2);
    store_nibble_weights(b + 4, wf + 32 * i, wf + 32 * i + 16, d, m, d, m);
  }
}

void expand_q4_k(const uint8_t* row, int64_t k, float* wf) {
  for (int64_t i = 0; i < k / 256; ++i) {
    const uint8_t* b = row + i * 144;
    float scale[16], bias[16];
    k_quant_groups(b + 4, read_fp16(b), read_fp16(b + 2), scale, bias);
    const uint8_t* qs = b + 16;
    float* w = wf + 256 * i;
    for (int c = 0; c < 4; ++c) {  // 32 bytes: 32 low nibbles, then 32 high nibbles
      for (int h = 0; h < 2; ++h) {
        const int lo = 4 * c + h, hi = 4 * c + 2 + h;  // 16-weight groups
        store_nibble_weights(qs + 32 * c + 16 * h, w + 16 * lo, w + 16 * hi, scale[lo], bias[lo], scale[hi],
                             bias[hi]);
      }
    }
  }
}

template <void (*Expand)(const uint8_t*, int64_t, float*)>
void run_expanded_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    Expand(p.b + n * p.row_bytes, p.k, s.wf);
    float out[4];
    int64_t m = 0;
    for (; m + 4 <= p.m; m += 4) {
      Avx512Fp32::dot<4>(p, x, s, m, out);
      for (int r = 0; r < 4; ++r) p.y[(m + r) * p.n + n] = out[r];
    }
    for (; m < p.m; ++m) {
      Avx512Fp32::dot<1>(p, x, s, m, out);
      p.y[m * p.n + n] = out[0];
    }
  }
}

}  // namespace

void avx512_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (p.type == kQ4_1) return run_expanded_range<expand_q4_1>(p, x, s, n0, n1);
  if (p.type == kQ4_K) return run_expanded_range<expand_q4_k>(p, x, s, n0, n1);
  run_range<Avx512Fp32>(p, x, s, n0, n1);
}

}  // namespace clika_kernels
#endif

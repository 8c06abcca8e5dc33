// AVX-512 BF16 split engine (fp32-grade): codes are small integers, exact in bf16, and each
// activation is split as a = hi + lo with hi, lo bf16, so code . a = code . hi + code . lo
// keeps 16 significant bits of every activation; vdpbf16ps does 32 products per instruction.
// Each 16-group's partial sum is scaled in fp32, and the biases meet the fp32 group sums of a.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,avx2,fma")

#include "avx512_common.h"
#include "row_loop.h"

namespace clika_kernels {
namespace {

inline __m512bh load_bf16(const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

struct Avx512Bf16 {
  static void prepare(const Problem& p, const RowScratch& s) {
    for (int64_t k = 0; k < p.k; k += 32) {
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.codes + k))));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.codes + k + 16))));
      _mm512_storeu_si512(s.wbf + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }

  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    __m512 acc[R][2];
    const uint16_t* hi[R];
    const uint16_t* lo[R];
    for (int r = 0; r < R; ++r) {
      hi[r] = x.a_hi + (m0 + r) * p.k;
      lo[r] = x.a_lo + (m0 + r) * p.k;
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 64 <= p.k; k += 64) {
      for (int j = 0; j < 2; ++j) {
        const int64_t at = k + 32 * j;
        const __m512bh w = load_bf16(s.wbf + at);
        const __m512 scales = avx512_pair_scales(s.scale16 + at / 16);
        for (int r = 0; r < R; ++r) {
          __m512 part = _mm512_dpbf16_ps(_mm512_setzero_ps(), w, load_bf16(hi[r] + at));
          part = _mm512_dpbf16_ps(part, w, load_bf16(lo[r] + at));
          acc[r][j] = _mm512_fmadd_ps(part, scales, acc[r][j]);
        }
      }
    }
    if (k < p.k) {
      const __m512bh w = load_bf16(s.wbf + k);
      const __m512 scales = avx512_pair_scales(s.scale16 + k / 16);
      for (int r = 0; r < R; ++r) {
        __m512 part = _mm512_dpbf16_ps(_mm512_setzero_ps(), w, load_bf16(hi[r] + k));
        part = _mm512_dpbf16_ps(part, w, load_bf16(lo[r] + k));
        acc[r][0] = _mm512_fmadd_ps(part, scales, acc[r][0]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float* sum16 = x.sum16 + (m0 + r) * (p.k / 16);
      out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) +
               avx512_bias_dot(s.bias16, sum16, p.k / 16);
    }
  }
};

// Q4_1 and Q4_K rows go from their bytes to bf16 codes in registers (no byte-code pass
// through memory); the codes, scales and biases are those decode_row + prepare give.
inline __m512 nibbles_ps(__m512i q, bool high) {
  return _mm512_cvtepi32_ps(high ? _mm512_srli_epi32(q, 4) : _mm512_and_si512(q, _mm512_set1_epi32(15)));
}

inline __m512i widen16(const uint8_t* bytes16) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes16)));
}

inline void store_bf16(uint16_t* out, __m512 first16, __m512 next16) {
  _mm512_storeu_si512(out, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(next16, first16)));
}

void expand_q4_1(const uint8_t* row, int64_t k, const RowScratch& s) {
  for (int64_t i = 0; i < k / 32; ++i) {
    const uint8_t* b = row + i * 20;
    const __m512i q = widen16(b + 4);
    store_bf16(s.wbf + 32 * i, nibbles_ps(q, false), nibbles_ps(q, true));
    set_groups(s.scale16 + 2 * i, s.bias16 + 2 * i, 0, 2, read_fp16(b), read_fp16(b + 2));
  }
}

void expand_q4_k(const uint8_t* row, int64_t k, const RowScratch& s) {
  for (int64_t i = 0; i < k / 256; ++i) {
    const uint8_t* b = row + i * 144;
    k_quant_groups(b + 4, read_fp16(b), read_fp16(b + 2), s.scale16 + 16 * i, s.bias16 + 16 * i);
    const uint8_t* qs = b + 16;
    uint16_t* w = s.wbf + 256 * i;
    for (int c = 0; c < 4; ++c) {  // 32 bytes: 32 low nibbles, then 32 high nibbles
      const __m512i first = widen16(qs + 32 * c), next = widen16(qs + 32 * c + 16);
      store_bf16(w + 64 * c, nibbles_ps(first, false), nibbles_ps(next, false));
      store_bf16(w + 64 * c + 32, nibbles_ps(first, true), nibbles_ps(next, true));
    }
  }
}

template <void (*Expand)(const uint8_t*, int64_t, const RowScratch&)>
void run_expanded_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    Expand(p.b + n * p.row_bytes, p.k, s);
    float out[4];
    int64_t m = 0;
    for (; m + 4 <= p.m; m += 4) {
      Avx512Bf16::dot<4>(p, x, s, m, out);
      for (int r = 0; r < 4; ++r) p.y[(m + r) * p.n + n] = out[r];
    }
    for (; m < p.m; ++m) {
      Avx512Bf16::dot<1>(p, x, s, m, out);
      p.y[m * p.n + n] = out[0];
    }
  }
}

}  // namespace

void avx512_bf16_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (p.type == kQ4_1) return run_expanded_range<expand_q4_1>(p, x, s, n0, n1);
  if (p.type == kQ4_K) return run_expanded_range<expand_q4_k>(p, x, s, n0, n1);
  run_range<Avx512Bf16>(p, x, s, n0, n1);
}

}  // namespace clika_kernels
#endif

// AVX2 engines: fp32 FMA (weights expanded once per row, as on AVX-512) and int8 on
// vpmaddubsw + vpmaddwd (8 lanes of 4 products; Q8_0's wide codes as in avx512_int8.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx2,fma")

#include "row_loop.h"

namespace clika_kernels {
namespace {

inline float reduce256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline float avx2_bias_dot(const float* bias16, const float* sum16, int64_t groups) {
  __m256 acc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(bias16 + g), _mm256_loadu_ps(sum16 + g), acc);
  float tail = 0.0f;
  for (; g < groups; ++g) tail += bias16[g] * sum16[g];
  return reduce256(acc) + tail;
}

struct Avx2Fp32 {
  static void prepare(const Problem& p, const RowScratch& s) {
    for (int64_t k = 0; k < p.k; k += 8) {
      const __m128i c8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.codes + k));
      const __m256 c = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c8));
      _mm256_storeu_ps(s.wf + k, _mm256_fmadd_ps(c, _mm256_set1_ps(s.scale16[k / 16]), _mm256_set1_ps(s.bias16[k / 16])));
    }
  }

  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    __m256 acc[R][4];
    const float* a[R];
    for (int r = 0; r < R; ++r) {
      a[r] = x.a + (m0 + r) * p.k;
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < p.k; k += 32) {  // k is a multiple of 32
      for (int j = 0; j < 4; ++j) {
        const __m256 w = _mm256_loadu_ps(s.wf + k + 8 * j);
        for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(a[r] + k + 8 * j), acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      out[r] = reduce256(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3])));
    }
  }
};

inline __m256i pair_sums(__m256i u, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

struct MaddubsDot {
  static inline __m256i lanes(__m256i u, __m256i a) { return pair_sums(u, a); }
};

struct WideCodeDot {
  static inline __m256i lanes(__m256i u, __m256i a) {
    const __m256i high = _mm256_set1_epi8(static_cast<char>(0x80));
    const __m256i q = _mm256_xor_si256(u, high);
    return _mm256_add_epi32(pair_sums(_mm256_abs_epi8(q), _mm256_sign_epi8(a, q)), pair_sums(high, a));
  }
};

template <class Dot>
struct Avx2Int8 {
  static void prepare(const Problem& p, const RowScratch& s) {
    for (int64_t g = 0; g < p.k / 16; ++g) {
      for (int j = 0; j < 4; ++j) s.lane_scale[4 * g + j] = s.scale16[g];
    }
  }

  template <int R>
  static inline void step(const RowScratch& s, const int8_t* const* qa, const float* const* lane_da, int64_t k,
                          __m256* acc) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.codes + k));
    const __m256 ls = _mm256_loadu_ps(s.lane_scale + k / 4);
    for (int r = 0; r < R; ++r) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa[r] + k));
      const __m256 scale = _mm256_mul_ps(ls, _mm256_loadu_ps(lane_da[r] + k / 4));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::lanes(u, a)), scale, acc[r]);
    }
  }

  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    __m256 acc0[R], acc1[R];
    const int8_t* qa[R];
    const float* lane_da[R];
    for (int r = 0; r < R; ++r) {
      qa[r] = x.qa + (m0 + r) * p.k;
      lane_da[r] = x.lane_da + (m0 + r) * (p.k / 4);
      acc0[r] = acc1[r] = _mm256_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 64 <= p.k; k += 64) {
      step<R>(s, qa, lane_da, k, acc0);
      step<R>(s, qa, lane_da, k + 32, acc1);
    }
    if (k < p.k) step<R>(s, qa, lane_da, k, acc0);
    for (int r = 0; r < R; ++r) {
      const float* sum16 = x.sum16 + (m0 + r) * (p.k / 16);
      out[r] = reduce256(_mm256_add_ps(acc0[r], acc1[r])) + avx2_bias_dot(s.bias16, sum16, p.k / 16);
    }
  }
};

}  // namespace

void avx2_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_range<Avx2Fp32>(p, x, s, n0, n1);
}

void avx2_int8_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (max_code(p.type) > 127) {
    run_range<Avx2Int8<WideCodeDot>>(p, x, s, n0, n1);
  } else {
    run_range<Avx2Int8<MaddubsDot>>(p, x, s, n0, n1);
  }
}

}  // namespace clika_kernels
#endif

// The AVX-512 int8 engine, shared by the VNNI and the maddubs builds: activations are int8
// per 32-block; one 512-bit integer dot gives 16 lanes of 4 products, each lane scaled by
// its 16-group's weight scale times its block's activation scale and accumulated in fp32.
// Included after the target options of the file that picks the integer dot.
#pragma once

#include <immintrin.h>

#include "avx512_common.h"
#include "row_loop.h"

namespace clika_kernels {
namespace {

// Dot: static __m512i lanes(__m512i codes_u8, __m512i acts_s8) -> 16 int32 sums of 4 products.
template <class Dot>
struct Avx512Int8 {
  static void prepare(const Problem& p, const RowScratch& s) {
    for (int64_t g = 0; g < p.k / 16; ++g) {
      for (int j = 0; j < 4; ++j) s.lane_scale[4 * g + j] = s.scale16[g];
    }
  }

  template <int R>
  static inline void step(const RowScratch& s, const int8_t* const* qa, const float* const* lane_da, int64_t k,
                          __mmask64 bytes, __mmask16 lanes, __m512* acc) {
    const __m512i u = _mm512_maskz_loadu_epi8(bytes, s.codes + k);
    const __m512 ls = _mm512_maskz_loadu_ps(lanes, s.lane_scale + k / 4);
    for (int r = 0; r < R; ++r) {
      const __m512i a = _mm512_maskz_loadu_epi8(bytes, qa[r] + k);
      const __m512 scale = _mm512_mul_ps(ls, _mm512_maskz_loadu_ps(lanes, lane_da[r] + k / 4));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(Dot::lanes(u, a)), scale, acc[r]);
    }
  }

  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    __m512 acc0[R], acc1[R];
    const int8_t* qa[R];
    const float* lane_da[R];
    for (int r = 0; r < R; ++r) {
      qa[r] = x.qa + (m0 + r) * p.k;
      lane_da[r] = x.lane_da + (m0 + r) * (p.k / 4);
      acc0[r] = acc1[r] = _mm512_setzero_ps();
    }
    const __mmask64 all_bytes = ~0ull;
    const __mmask16 all_lanes = 0xffff;
    int64_t k = 0;
    for (; k + 128 <= p.k; k += 128) {
      step<R>(s, qa, lane_da, k, all_bytes, all_lanes, acc0);
      step<R>(s, qa, lane_da, k + 64, all_bytes, all_lanes, acc1);
    }
    if (k + 64 <= p.k) {
      step<R>(s, qa, lane_da, k, all_bytes, all_lanes, acc0);
      k += 64;
    }
    if (k < p.k) step<R>(s, qa, lane_da, k, 0xffffffffull, 0x00ff, acc1);  // 32 left
    for (int r = 0; r < R; ++r) {
      const float* sum16 = x.sum16 + (m0 + r) * (p.k / 16);
      out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])) + avx512_bias_dot(s.bias16, sum16, p.k / 16);
    }
  }
};

}  // namespace
}  // namespace clika_kernels

// AVX-512 int8 engine on VNNI, weights decoded in registers: vpdpbusd multiplies a chunk's
// 64 unsigned codes by 64 signed activations into 16 exact int32 lanes of 4 products; each
// lane is scaled by its 16-group's weight scale times its block's activation scale and
// accumulated in fp32; the biases meet the activations' group sums once per unit.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

#include "avx512_rows.h"

namespace clika_kernels {
namespace {

// Lane l of chunk c holds weights 4l..4l+3 of the chunk, of the unit's 16-group 4c + l / 4.
inline __m512i lane_groups(int c) {
  return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), _mm512_set1_epi32(4 * c));
}

inline __mmask16 group_mask(int groups) { return static_cast<__mmask16>((1u << groups) - 1u); }

// Per unit and activation row, each 16-group's weight scale times its activation scale
// (one product, as the scalar reference forms it), then spread to the chunks' lanes.
template <int R>
struct VnniRows {
  const int8_t* qa[R];
  const float* group_da[R];
  const float* sum16[R];
  __m512 acc[R];
  __m512 bias[R];
  __m512 scale[R];

  VnniRows(const Problem& p, const Activations& x, int64_t m0) {
    for (int r = 0; r < R; ++r) {
      qa[r] = x.qa + (m0 + r) * p.k;
      group_da[r] = x.group_da + (m0 + r) * (p.k / 16);
      sum16[r] = x.sum16 + (m0 + r) * (p.k / 16);
      acc[r] = bias[r] = _mm512_setzero_ps();
    }
  }

  void unit(int64_t k0, int groups, const float* scale16, const float* bias16) {
    const __mmask16 live = group_mask(groups);
    const __m512 ws = _mm512_load_ps(scale16);
    const __m512 wb = _mm512_load_ps(bias16);
    for (int r = 0; r < R; ++r) {
      scale[r] = _mm512_mul_ps(ws, _mm512_maskz_loadu_ps(live, group_da[r] + k0 / 16));
      bias[r] = _mm512_fmadd_ps(wb, _mm512_maskz_loadu_ps(live, sum16[r] + k0 / 16), bias[r]);
    }
  }

  void chunk(__m512i codes, const uint8_t*, int64_t k, int c, bool half, const float*, const float*) {
    const __m512i lanes = lane_groups(c);
    const __mmask64 bytes = half ? 0xffffffffull : ~0ull;
    for (int r = 0; r < R; ++r) {
      const __m512i a = _mm512_maskz_loadu_epi8(bytes, qa[r] + k);
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, a));
      acc[r] = _mm512_fmadd_ps(dot, _mm512_permutexvar_ps(lanes, scale[r]), acc[r]);
    }
  }

  void finish(float* out) {
    for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) + _mm512_reduce_add_ps(bias[r]);
  }
};

}  // namespace

void avx512_vnni_int8_range(const Problem& p, const Activations& x, const RowScratch&, int64_t n0, int64_t n1) {
  run_by_format<VnniRows>(p, x, n0, n1);
}

}  // namespace clika_kernels
#endif

// AVX-512 int8 engine without VNNI: vpmaddubsw + vpmaddwd in place of vpdpbusd, on the
// same unit walk (avx512_units.h). The 16-bit pair sums saturate past 32767, which codes
// below 128 never reach (2 * 63 * 127); Q8_0's codes (q + 128) go through |q| times
// sign-adjusted activations plus 128 times the activations, which gives the same exact
// lane sums as VNNI.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

#include "avx512_units.h"

namespace clika_kernels {
namespace {

inline __m512i pair_sums(__m512i u, __m512i a) {
  return _mm512_madd_epi16(_mm512_maddubs_epi16(u, a), _mm512_set1_epi16(1));
}

struct MaddubsDot {
  static inline __m512i add(__m512i acc, __m512i u, __m512i a) { return _mm512_add_epi32(acc, pair_sums(u, a)); }
};

struct WideCodeDot {
  static inline __m512i add(__m512i acc, __m512i u, __m512i a) {
    const __m512i q = _mm512_xor_si512(u, _mm512_set1_epi8(static_cast<char>(0x80)));
    const __m512i signed_a = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(q), _mm512_setzero_si512(), a);
    const __m512i qa = pair_sums(_mm512_abs_epi8(q), signed_a);
    return _mm512_add_epi32(acc, _mm512_add_epi32(qa, pair_sums(_mm512_set1_epi8(static_cast<char>(0x80)), a)));
  }
};

}  // namespace

void avx512_int8_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (max_code(p.type) > 127) {
    run_units<WideCodeDot>(p, x, s, n0, n1);
  } else {
    run_units<MaddubsDot>(p, x, s, n0, n1);
  }
}

}  // namespace clika_kernels
#endif

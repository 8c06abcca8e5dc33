// HeadRescore's dot in AVX-512: rescore_math.h's lane array is one register, each lane
// given the portable path's operations in its order (so this path's bits are its bits).
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

#include "rescore.h"
#include "rescore_math.h"

namespace clika_kernels {
namespace {

struct Avx512Dot {
  static float row_dot(const RescoreProblem& p, const float* x, int64_t i) {
    const uint8_t* codes = p.codes + i * p.k;
    const float* scales = p.scales + i * p.blocks;
    const uint8_t* zeros = p.zero_points ? p.zero_points + i * p.blocks : nullptr;
    __m512 lanes = _mm512_setzero_ps();
    for (int64_t b = 0; b < p.blocks; ++b) {
      const __m512 scale = _mm512_set1_ps(scales[b]);
      const __m512 zero = _mm512_set1_ps(zeros ? static_cast<float>(zeros[b]) : 128.0f);
      for (int64_t c = b * p.block; c < (b + 1) * p.block; c += rescore_math::kLanes) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + c));
        const __m512 code = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q));
        const __m512 weight = _mm512_mul_ps(_mm512_sub_ps(code, zero), scale);
        lanes = _mm512_add_ps(lanes, _mm512_mul_ps(weight, _mm512_loadu_ps(x + c)));
      }
    }
    alignas(64) float out[rescore_math::kLanes];
    _mm512_store_ps(out, lanes);
    return rescore_math::halved(out);
  }
};

}  // namespace

void rescore_ids_avx512(const RescoreProblem& p, int64_t token, const int64_t* ids, int64_t count) {
  rescore_math::rescore<Avx512Dot>(p, token, ids, count);
}

}  // namespace clika_kernels
#endif

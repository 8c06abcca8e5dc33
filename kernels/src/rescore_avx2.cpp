// HeadRescore's dot in AVX2: rescore_math.h's lane array is two registers (lanes 0-7 and
// 8-15), each lane given the portable path's operations in its order.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx2")

#include "rescore.h"
#include "rescore_math.h"

namespace clika_kernels {
namespace {

inline __m256 eight_codes(const uint8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

struct Avx2Dot {
  static float row_dot(const RescoreProblem& p, const float* x, int64_t i) {
    const uint8_t* codes = p.codes + i * p.k;
    const float* scales = p.scales + i * p.blocks;
    const uint8_t* zeros = p.zero_points ? p.zero_points + i * p.blocks : nullptr;
    __m256 low = _mm256_setzero_ps(), high = _mm256_setzero_ps();
    for (int64_t b = 0; b < p.blocks; ++b) {
      const __m256 scale = _mm256_set1_ps(scales[b]);
      const __m256 zero = _mm256_set1_ps(zeros ? static_cast<float>(zeros[b]) : 128.0f);
      for (int64_t c = b * p.block; c < (b + 1) * p.block; c += rescore_math::kLanes) {
        const __m256 w0 = _mm256_mul_ps(_mm256_sub_ps(eight_codes(codes + c), zero), scale);
        const __m256 w1 = _mm256_mul_ps(_mm256_sub_ps(eight_codes(codes + c + 8), zero), scale);
        low = _mm256_add_ps(low, _mm256_mul_ps(w0, _mm256_loadu_ps(x + c)));
        high = _mm256_add_ps(high, _mm256_mul_ps(w1, _mm256_loadu_ps(x + c + 8)));
      }
    }
    alignas(32) float out[rescore_math::kLanes];
    _mm256_store_ps(out, low);
    _mm256_store_ps(out + 8, high);
    return rescore_math::halved(out);
  }
};

}  // namespace

void rescore_ids_avx2(const RescoreProblem& p, int64_t token, const int64_t* ids, int64_t count) {
  rescore_math::rescore<Avx2Dot>(p, token, ids, count);
}

}  // namespace clika_kernels
#endif

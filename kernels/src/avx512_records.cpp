// The unit engines' activation records (kernel_api.h), built with AVX-512: a unit's four
// chunks of 64 int8 activations go into lane order by the same 4x4 transpose of 32-bit
// lanes the weights' codes use (to_lane_order), each lane's scale is the group scale of
// its lane's group, and the symmetric formats' seeds are each lane's sum of q (four
// pair-sums of bytes, exact) times -zero. Only the AVX-512 engines read these records.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

#include <algorithm>

#include "activations.h"
#include "avx512_lane_codes.h"

namespace clika_kernels {
namespace {

inline __mmask64 bytes_below(int64_t live) {
  return live >= 64 ? ~0ull : live <= 0 ? 0ull : (1ull << live) - 1;
}

inline __mmask16 groups_below(int64_t live) {
  return static_cast<__mmask16>(live >= 16 ? 0xffff : live <= 0 ? 0 : (1u << live) - 1);
}

}  // namespace

void avx512_unit_records(const int8_t* qa, const float* group_da, const float* sum16, int64_t k, int64_t units,
                         int zero, uint8_t* first, int64_t stride) {
  const __m512i lane_groups = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i ones8 = _mm512_set1_epi8(1);
  const __m512i ones16 = _mm512_set1_epi16(1);
  for (int64_t u = 0; u < units; ++u) {
    uint8_t* record = first + u * stride;
    const int64_t k0 = 256 * u;
    const int64_t live = std::min<int64_t>(256, k - k0);
    __m512i c[4];
    for (int d = 0; d < 4; ++d) c[d] = _mm512_maskz_loadu_epi8(bytes_below(live - 64 * d), qa + k0 + 64 * d);
    to_lane_order(c);
    for (int j = 0; j < 4; ++j) _mm512_store_si512(record + 64 * j, c[j]);
    const __mmask16 groups = groups_below(live / 16);
    const __m512 da = _mm512_maskz_loadu_ps(groups, group_da + 16 * u);
    _mm512_store_ps(reinterpret_cast<float*>(record + 256), _mm512_permutexvar_ps(lane_groups, da));
    if (zero == 0) {
      _mm512_store_ps(reinterpret_cast<float*>(record + 320), _mm512_maskz_loadu_ps(groups, sum16 + 16 * u));
      continue;
    }
    __m512i sums = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) sums = _mm512_add_epi32(sums, _mm512_madd_epi16(_mm512_maddubs_epi16(ones8, c[j]), ones16));
    _mm512_store_si512(record + 320, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-zero)));
  }
}

}  // namespace clika_kernels
#endif

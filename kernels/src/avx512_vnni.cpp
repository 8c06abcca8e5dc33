// AVX-512 int8 engine on VNNI: vpdpbusd multiplies unsigned codes by signed activations
// and sums each 4 products into an int32 lane, exactly, for every format.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")

#include "avx512_int8.h"

namespace clika_kernels {
namespace {

struct VnniDot {
  static inline __m512i lanes(__m512i u, __m512i a) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, a); }
};

}  // namespace

void avx512_vnni_int8_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_range<Avx512Int8<VnniDot>>(p, x, s, n0, n1);
}

}  // namespace clika_kernels
#endif

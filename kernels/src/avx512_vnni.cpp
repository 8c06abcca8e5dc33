// AVX-512 int8 engine on VNNI: vpdpbusd multiplies 64 unsigned codes by 64 signed
// activations into 16 exact int32 lanes, accumulated over a unit's four chunks in lane
// order (avx512_units.h).
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

#include "avx512_units.h"

namespace clika_kernels {
namespace {

struct VnniDot {
  static inline __m512i add(__m512i acc, __m512i u, __m512i a) { return _mm512_dpbusd_epi32(acc, u, a); }
};

}  // namespace

void avx512_vnni_int8_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_units<VnniDot>(p, x, s, n0, n1);
}

}  // namespace clika_kernels
#endif

// ARM NEON int8 engine on the dot-product extension (sdot): four products a lane in one
// instruction. sdot multiplies signed by signed, so codes of 128 and over (Q8_0's q + 128)
// are taken as q = code - 128 and 128 times the activations' sum added back, exactly.
#if defined(__aarch64__)
#pragma GCC target("arch=armv8.2-a+dotprod")
#include <arm_neon.h>

#include "neon_common.h"
#include "row_loop.h"

namespace clika_kernels {
namespace {

struct SdotDot {
  static inline int32_t group(const uint8_t* codes, const int8_t* qa) {
    const int8x16_t q = vld1q_s8(qa);
    const uint8x16_t c = vld1q_u8(codes);
    const int8x16_t centred = vreinterpretq_s8_u8(veorq_u8(c, vdupq_n_u8(0x80)));
    const int32x4_t products = vdotq_s32(vdupq_n_s32(0), centred, q);
    const int32x4_t sums = vdotq_s32(vdupq_n_s32(0), vdupq_n_s8(1), q);
    return vaddvq_s32(products) + 128 * vaddvq_s32(sums);
  }
};

}  // namespace

void neon_dotprod_int8_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_range<NeonInt8<SdotDot>>(p, x, s, n0, n1);
}

}  // namespace clika_kernels
#endif

// ARM NEON engines (aarch64, where NEON is always present): fp32 FMA over the row expanded
// once, and int8 by widening multiplies; each 16-group's exact integer sum is scaled by
// its weight scale times its activation scale. The sdot engine is neon_dotprod.cpp.
#if defined(__aarch64__)
#include <arm_neon.h>

#include "neon_common.h"
#include "row_loop.h"

namespace clika_kernels {
namespace {

struct NeonFp32 {
  static void prepare(const Problem& p, const RowScratch& s) {
    for (int64_t k = 0; k < p.k; k += 16) {
      const uint8x16_t c = vld1q_u8(s.codes + k);
      const uint16x8_t lo = vmovl_u8(vget_low_u8(c)), hi = vmovl_u8(vget_high_u8(c));
      const float32x4_t scale = vdupq_n_f32(s.scale16[k / 16]), bias = vdupq_n_f32(s.bias16[k / 16]);
      const uint16x4_t parts[4] = {vget_low_u16(lo), vget_high_u16(lo), vget_low_u16(hi), vget_high_u16(hi)};
      for (int j = 0; j < 4; ++j) {
        vst1q_f32(s.wf + k + 4 * j, vfmaq_f32(bias, vcvtq_f32_u32(vmovl_u16(parts[j])), scale));
      }
    }
  }

  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    float32x4_t acc[R][4];
    const float* a[R];
    for (int r = 0; r < R; ++r) {
      a[r] = x.a + (m0 + r) * p.k;
      for (int j = 0; j < 4; ++j) acc[r][j] = vdupq_n_f32(0.0f);
    }
    for (int64_t k = 0; k < p.k; k += 16) {  // k is a multiple of 32
      for (int j = 0; j < 4; ++j) {
        const float32x4_t w = vld1q_f32(s.wf + k + 4 * j);
        for (int r = 0; r < R; ++r) acc[r][j] = vfmaq_f32(acc[r][j], w, vld1q_f32(a[r] + k + 4 * j));
      }
    }
    for (int r = 0; r < R; ++r) {
      out[r] = vaddvq_f32(vaddq_f32(vaddq_f32(acc[r][0], acc[r][1]), vaddq_f32(acc[r][2], acc[r][3])));
    }
  }
};

// The exact integer sum of 16 codes (0..255) times 16 int8 activations.
struct WideningDot {
  static inline int32_t group(const uint8_t* codes, const int8_t* qa) {
    const uint8x16_t c = vld1q_u8(codes);
    const int8x16_t q = vld1q_s8(qa);
    const int16x8_t c0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(c)));
    const int16x8_t c1 = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(c)));
    const int16x8_t q0 = vmovl_s8(vget_low_s8(q)), q1 = vmovl_s8(vget_high_s8(q));
    int32x4_t s = vmull_s16(vget_low_s16(c0), vget_low_s16(q0));
    s = vmlal_s16(s, vget_high_s16(c0), vget_high_s16(q0));
    s = vmlal_s16(s, vget_low_s16(c1), vget_low_s16(q1));
    s = vmlal_s16(s, vget_high_s16(c1), vget_high_s16(q1));
    return vaddvq_s32(s);
  }
};

}  // namespace

void neon_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_range<NeonFp32>(p, x, s, n0, n1);
}

void neon_int8_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_range<NeonInt8<WideningDot>>(p, x, s, n0, n1);
}

}  // namespace clika_kernels
#endif

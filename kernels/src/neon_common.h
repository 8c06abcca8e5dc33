// The NEON int8 engine, shared by the widening and the sdot builds: per 16-group the exact
// integer sum of codes times activations, four groups at a time scaled in fp32 by weight
// scale times activation scale; the biases meet the activations' group sums at the end.
// Included after the target options of the file that picks the integer dot.
#pragma once

#include <arm_neon.h>

#include "kernel_api.h"

namespace clika_kernels {
namespace {

inline float neon_bias_dot(const float* bias16, const float* sum16, int64_t groups) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  int64_t g = 0;
  for (; g + 4 <= groups; g += 4) acc = vfmaq_f32(acc, vld1q_f32(bias16 + g), vld1q_f32(sum16 + g));
  float tail = 0.0f;
  for (; g < groups; ++g) tail += bias16[g] * sum16[g];
  return vaddvq_f32(acc) + tail;
}

// Dot: static int32_t group(const uint8_t* codes16, const int8_t* qa16).
template <class Dot>
struct NeonInt8 {
  static void prepare(const Problem&, const RowScratch&) {}

  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    const int64_t groups = p.k / 16;  // even: k is a multiple of 32
    for (int r = 0; r < R; ++r) {
      const int8_t* qa = x.qa + (m0 + r) * p.k;
      const float* group_da = x.group_da + (m0 + r) * groups;
      float32x4_t acc = vdupq_n_f32(0.0f);
      float tail = 0.0f;
      int64_t g = 0;
      for (; g + 4 <= groups; g += 4) {
        const int32_t sums[4] = {Dot::group(s.codes + 16 * g, qa + 16 * g),
                                 Dot::group(s.codes + 16 * (g + 1), qa + 16 * (g + 1)),
                                 Dot::group(s.codes + 16 * (g + 2), qa + 16 * (g + 2)),
                                 Dot::group(s.codes + 16 * (g + 3), qa + 16 * (g + 3))};
        const float32x4_t scale = vmulq_f32(vld1q_f32(s.scale16 + g), vld1q_f32(group_da + g));
        acc = vfmaq_f32(acc, vcvtq_f32_s32(vld1q_s32(sums)), scale);
      }
      for (; g < groups; ++g) {
        tail += static_cast<float>(Dot::group(s.codes + 16 * g, qa + 16 * g)) * (s.scale16[g] * group_da[g]);
      }
      out[r] = vaddvq_f32(acc) + tail + neon_bias_dot(s.bias16, x.sum16 + (m0 + r) * groups, groups);
    }
  }
};

}  // namespace
}  // namespace clika_kernels

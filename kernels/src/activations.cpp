#include "activations.h"

#include <cmath>

namespace clika_kernels {
namespace {

// int8 per 32-block: d = max|a| / 127, q = round-half-even(a / d) clamped to [-127, 127];
// rounding through 1.5 * 2^23 so the loop vectorizes, and a NaN input quantizes to 0.
void quantize_row(const float* a, int64_t k, int8_t* qa, float* lane_da, float* group_da, float* sum16) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* x = a + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    int8_t* q = qa + 32 * b;
    for (int j = 0; j < 32; ++j) {
      float v = x[j] * inv;
      v = v > 127.0f ? 127.0f : v;
      v = v < -127.0f ? -127.0f : v;
      v = v == v ? v : 0.0f;
      v = (v + 12582912.0f) - 12582912.0f;
      q[j] = static_cast<int8_t>(v);
    }
    for (int j = 0; j < 8; ++j) lane_da[8 * b + j] = d;
    group_da[2 * b] = group_da[2 * b + 1] = d;
    for (int h = 0; h < 2; ++h) {
      int32_t s = 0;
      for (int j = 0; j < 16; ++j) s += q[16 * h + j];
      sum16[2 * b + h] = d * static_cast<float>(s);
    }
  }
}

}  // namespace

void allocate_activations(const float* a, int64_t m, int64_t k, ActivationForm form, PreparedActivations* out) {
  out->view = Activations{};
  out->view.a = a;
  if (form == ActivationForm::kInt8) {
    out->qa.resize(m * k);
    out->lane_da.resize(m * k / 4);
    out->group_da.resize(m * k / 16);
    out->sum16.resize(m * k / 16);
    out->view.qa = out->qa.data();
    out->view.lane_da = out->lane_da.data();
    out->view.group_da = out->group_da.data();
    out->view.sum16 = out->sum16.data();
  }
}

void prepare_rows(const float* a, int64_t k, ActivationForm form, PreparedActivations* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    if (form == ActivationForm::kInt8) {
      quantize_row(a + r * k, k, out->qa.data() + r * k, out->lane_da.data() + r * k / 4,
                   out->group_da.data() + r * k / 16,
                   out->sum16.data() + r * k / 16);
    }
  }
}

}  // namespace clika_kernels

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

// The unit engines' order (avx512_units.h): within a unit of 256 weights, byte
// 64j + 16i + 4d + b holds weight 64d + 16i + 4j + b, so int32 lane 4i + d of the four
// chunk dot products sums exactly the 16 weights of group 4d + i. Lane scales follow.
void order_units(const int8_t* qa, const float* group_da, const float* sum16, int64_t k, int64_t units,
                 int8_t* unit_qa, float* unit_da, float* unit_sum16) {
  for (int64_t u = 0; u < units; ++u) {
    const int64_t k0 = 256 * u;
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        for (int d = 0; d < 4; ++d) {
          for (int b = 0; b < 4; ++b) {
            const int64_t w = k0 + 64 * d + 16 * i + 4 * j + b;
            unit_qa[k0 + 64 * j + 16 * i + 4 * d + b] = w < k ? qa[w] : 0;
          }
        }
      }
    }
    for (int lane = 0; lane < 16; ++lane) {
      const int64_t g = 16 * u + 4 * (lane % 4) + lane / 4;
      unit_da[16 * u + lane] = g < k / 16 ? group_da[g] : 0.0f;
      unit_sum16[16 * u + lane] = 16 * u + lane < k / 16 ? sum16[16 * u + lane] : 0.0f;
    }
  }
}

}  // namespace

void allocate_activations(const float* a, int64_t m, int64_t k, ActivationForm form, PreparedActivations* out) {
  out->view = Activations{};
  out->view.a = a;
  if (form != ActivationForm::kFp32) {
    out->qa.resize(m * k);
    out->lane_da.resize(m * k / 4);
    out->group_da.resize(m * k / 16);
    out->sum16.resize(m * k / 16);
    out->view.qa = out->qa.data();
    out->view.lane_da = out->lane_da.data();
    out->view.group_da = out->group_da.data();
    out->view.sum16 = out->sum16.data();
  }
  if (form == ActivationForm::kInt8Units) {
    const int64_t units = (k + 255) / 256;
    out->unit_qa.resize(m * units * 256);
    out->unit_da.resize(m * units * 16);
    out->unit_sum16.resize(m * units * 16);
    out->view.units = units;
    out->view.unit_qa = out->unit_qa.data();
    out->view.unit_da = out->unit_da.data();
    out->view.unit_sum16 = out->unit_sum16.data();
  }
}

void prepare_rows(const float* a, int64_t k, ActivationForm form, PreparedActivations* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    if (form == ActivationForm::kFp32) continue;
    quantize_row(a + r * k, k, out->qa.data() + r * k, out->lane_da.data() + r * k / 4,
                 out->group_da.data() + r * k / 16, out->sum16.data() + r * k / 16);
    if (form == ActivationForm::kInt8Units) {
      const int64_t units = out->view.units;
      order_units(out->qa.data() + r * k, out->group_da.data() + r * k / 16, out->sum16.data() + r * k / 16, k,
                  units, out->unit_qa.data() + r * units * 256, out->unit_da.data() + r * units * 16,
                  out->unit_sum16.data() + r * units * 16);
    }
  }
}

}  // namespace clika_kernels

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
    for (int j = 0; j < 32; ++j) {
      const float v = std::fabs(x[j]);
      amax = v > amax ? v : amax;  // NaN never wins, as with fmax; and the loop vectorizes
    }
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

// The unit engines' records (kernel_api.h): within a unit of 256 weights, byte
// 64j + 16i + 4d + b holds weight 64d + 16i + 4j + b, so int32 lane 4i + d of the four
// chunk dot products sums exactly the 16 weights of group 4d + i.
void unit_records(const int8_t* qa, const float* group_da, const float* sum16, int64_t k, int64_t units, int zero,
                  uint8_t* first, int64_t stride) {
  for (int64_t u = 0; u < units; ++u) {
    uint8_t* record = first + u * stride;
    const int64_t k0 = 256 * u;
    int8_t* q = reinterpret_cast<int8_t*>(record);
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        for (int d = 0; d < 4; ++d) {
          for (int b = 0; b < 4; ++b) {
            const int64_t w = k0 + 64 * d + 16 * i + 4 * j + b;
            q[64 * j + 16 * i + 4 * d + b] = w < k ? qa[w] : 0;
          }
        }
      }
    }
    float* da = reinterpret_cast<float*>(record + 256);
    float* sums = reinterpret_cast<float*>(record + 320);
    int32_t* seeds = reinterpret_cast<int32_t*>(record + 320);
    for (int lane = 0; lane < 16; ++lane) {
      const int64_t g = 16 * u + 4 * (lane % 4) + lane / 4;
      const bool live = g < k / 16;
      da[lane] = live ? group_da[g] : 0.0f;
      if (zero == 0) {
        sums[lane] = 16 * u + lane < k / 16 ? sum16[16 * u + lane] : 0.0f;
      } else {
        int32_t sum = 0;
        for (int t = 0; live && t < 16; ++t) sum += qa[16 * g + t];
        seeds[lane] = -zero * sum;
      }
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
    const int64_t tiles = (m + kRecordRows - 1) / kRecordRows;
    out->unit_records.resize(static_cast<size_t>(tiles * units * kRecordRows * kUnitRecordBytes + 64));
    const uintptr_t at = reinterpret_cast<uintptr_t>(out->unit_records.data());
    out->view.units = units;
    out->view.unit_records = out->unit_records.data() + (64 - at % 64) % 64;
  }
}

void prepare_rows(const float* a, int64_t k, ActivationForm form, PreparedActivations* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    if (form == ActivationForm::kFp32) continue;
    quantize_row(a + r * k, k, out->qa.data() + r * k, out->lane_da.data() + r * k / 4,
                 out->group_da.data() + r * k / 16, out->sum16.data() + r * k / 16);
    if (form == ActivationForm::kInt8Units) {
      const int64_t units = out->view.units;
      const int64_t tile = r / kRecordRows, slot = r % kRecordRows;
      uint8_t* first = const_cast<uint8_t*>(out->view.unit_records) +
                       ((tile * units) * kRecordRows + slot) * kUnitRecordBytes;
      unit_records(out->qa.data() + r * k, out->group_da.data() + r * k / 16, out->sum16.data() + r * k / 16, k, units,
                   out->zero, first, kRecordRows * kUnitRecordBytes);
    }
  }
}

}  // namespace clika_kernels

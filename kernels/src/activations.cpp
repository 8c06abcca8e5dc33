#include "activations.h"

#include <cmath>

namespace clika_kernels {
namespace {

// int8 per 32-block: d = max|a| / 127, q = round-half-even(a / d) clamped to [-127, 127];
// rounding through 1.5 * 2^23 so the loop vectorizes, and a NaN input quantizes to 0.
void quantize_row(const float* a, int64_t k, int8_t* qa, float* lane_da, float* group_da, float* sum16,
                  float* sum32) {
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
    int32_t halves[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 16; ++j) halves[h] += q[16 * h + j];
      sum16[2 * b + h] = d * static_cast<float>(halves[h]);
    }
    sum32[b] = d * static_cast<float>(halves[0] + halves[1]);  // integer sums: exact
  }
}

// Each group's sum, added in weight order (no reassociation: -ffp-contract=off, no
// fast-math), so a row's sums never depend on the rows beside it.
void group_sums(const float* a, int64_t k, int group, float* sums) {
  for (int64_t g = 0; g < k / group; ++g) {
    float s = 0.0f;
    for (int j = 0; j < group; ++j) s += a[group * g + j];
    sums[g] = s;
  }
}

}  // namespace

void allocate_activations(const float* a, int64_t m, int64_t k, ActivationForm form, PreparedActivations* out) {
  out->view = Activations{};
  out->view.a = a;
  if (form == ActivationForm::kFp32Sums) {
    out->xsum.resize(m * k / out->sum_group);
    out->view.xsum = out->xsum.data();
  }
  if (form == ActivationForm::kInt8 || form == ActivationForm::kInt8Units) {
    out->qa.resize(m * k);
    out->lane_da.resize(m * k / 4);
    out->group_da.resize(m * k / 16);
    out->sum16.resize(m * k / 16);
    out->sum32.resize(m * k / 32);
    out->view.qa = out->qa.data();
    out->view.lane_da = out->lane_da.data();
    out->view.group_da = out->group_da.data();
    out->view.sum16 = out->sum16.data();
    out->view.sum32 = out->sum32.data();
  }
#if defined(__x86_64__)
  if (form == ActivationForm::kBf16Split) {
    const int64_t row_bytes = bf16_record_row_bytes(out->type, k);
    out->bf16_records.resize(static_cast<size_t>(m * row_bytes + 64));
    const uintptr_t at = reinterpret_cast<uintptr_t>(out->bf16_records.data());
    out->view.bf16_records = out->bf16_records.data() + (64 - at % 64) % 64;
    out->view.bf16_row_bytes = row_bytes;
  }
  if (form == ActivationForm::kSplit16) {
    const int64_t row_bytes = split16_record_row_bytes(k);
    out->split16_records.resize(static_cast<size_t>(m * row_bytes + 64));
    const uintptr_t at = reinterpret_cast<uintptr_t>(out->split16_records.data());
    out->view.split16_records = out->split16_records.data() + (64 - at % 64) % 64;
    out->view.split16_row_bytes = row_bytes;
  }
#endif
  if (form == ActivationForm::kInt8Units) {
    const int64_t units = (k + 255) / 256;
    const int64_t tiles = (m + kRecordRows - 1) / kRecordRows;
    out->unit_records.resize(static_cast<size_t>(tiles * units * kRecordRows * kUnitRecordBytes + 64));
    const uintptr_t at = reinterpret_cast<uintptr_t>(out->unit_records.data());
    out->view.units = units;
    out->view.m = m;
    out->view.unit_records = out->unit_records.data() + (64 - at % 64) % 64;
  }
}

void prepare_rows(const float* a, int64_t k, ActivationForm form, PreparedActivations* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    if (form == ActivationForm::kFp32) continue;
#if defined(__x86_64__)
    if (form == ActivationForm::kBf16Split) {
      avx512_bf16_records(a + r * k, out->type, k,
                          const_cast<uint8_t*>(out->view.bf16_records) + r * out->view.bf16_row_bytes);
      continue;
    }
    if (form == ActivationForm::kSplit16) {
      split16_records(a + r * k, k,
                      const_cast<uint8_t*>(out->view.split16_records) + r * out->view.split16_row_bytes);
      continue;
    }
#endif
    if (form == ActivationForm::kFp32Sums) {
      group_sums(a + r * k, k, out->sum_group, out->xsum.data() + r * k / out->sum_group);
      continue;
    }
    quantize_row(a + r * k, k, out->qa.data() + r * k, out->lane_da.data() + r * k / 4,
                 out->group_da.data() + r * k / 16, out->sum16.data() + r * k / 16, out->sum32.data() + r * k / 32);
#if defined(__x86_64__)  // the unit form is read by the AVX-512 engines only
    if (form == ActivationForm::kInt8Units) {
      const int64_t units = out->view.units;
      const int64_t tile = r / kRecordRows, slot = r % kRecordRows;
      const int64_t rows = record_tile_rows(out->view.m, tile * kRecordRows);
      uint8_t* first = const_cast<uint8_t*>(out->view.unit_records) +
                       (tile * units * kRecordRows + slot) * kUnitRecordBytes;
      avx512_unit_records(out->qa.data() + r * k, out->group_da.data() + r * k / 16, out->sum16.data() + r * k / 16,
                          k, units, out->zero, first, rows * kUnitRecordBytes);
    }
#endif
  }
}

}  // namespace clika_kernels

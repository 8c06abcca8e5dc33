// Activations prepared once per call for the engine that will run: fp32 as given, or int8
// per 32-block with its scales; each row on its own, so rows never interact.
#pragma once

#include <cstdint>
#include <vector>

#include "kernel_api.h"

namespace clika_kernels {

// kFp32Sums: fp32 plus each group's sum (sum_group weights); kInt8Units: kInt8 plus the unit-ordered
// copies the unit engines read; kBf16Split: fp32 plus its bf16 halves in code order (type set);
// kSplit16: fp32 plus its 16-bit integer records per 32-block (type set).
enum class ActivationForm { kFp32, kFp32Sums, kInt8, kInt8Units, kBf16Split, kSplit16 };

struct PreparedActivations {
  std::vector<int8_t> qa;
  std::vector<float> xsum, lane_da, group_da, sum16, sum32;
  std::vector<uint8_t> unit_records, bf16_records, split16_records;
  int zero = 0;  // kInt8Units: the format's symmetric zero point (formats.h), set before preparing
  int sum_group = 0;  // kFp32Sums: weights a sum covers, set before allocating
  int type = 0;       // kBf16Split: the weights' ggml type, set before allocating
  Activations view{};
};

// Sizes the buffers for m rows of k; prepare_rows then fills rows [r0, r1) (callable in parallel).
void allocate_activations(const float* a, int64_t m, int64_t k, ActivationForm form, PreparedActivations* out);
#if defined(__x86_64__)
// One row's unit records (kernel_api.h), `units` of them `stride` bytes apart from `first`
// (avx512_records.cpp).
void avx512_unit_records(const int8_t* qa, const float* group_da, const float* sum16, int64_t k, int64_t units,
                         int zero, uint8_t* first, int64_t stride);
// The BF16 split engine's formats (Q4_0, Q4_1), the bytes of one row's records, and one
// row's records (avx512_bf16.cpp).
bool bf16_split_format(int type);
int64_t bf16_record_row_bytes(int type, int64_t k);
void avx512_bf16_records(const float* a, int type, int64_t k, uint8_t* out);
// The 16-bit split engine's formats (Q4_0, Q4_1), the bytes of one row's records, and one
// row's records (avx512_split16.cpp).
bool split16_format(int type);
int64_t split16_record_row_bytes(int64_t k);
void split16_records(const float* a, int64_t k, uint8_t* out);
#endif
void prepare_rows(const float* a, int64_t k, ActivationForm form, PreparedActivations* out, int64_t r0, int64_t r1);

}  // namespace clika_kernels

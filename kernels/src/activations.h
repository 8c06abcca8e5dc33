// Activations prepared once per call for the engine that will run: fp32 as given, or int8
// per 32-block with its scales; each row on its own, so rows never interact.
#pragma once

#include <cstdint>
#include <vector>

#include "kernel_api.h"

namespace clika_kernels {

// kInt8Units: kInt8 plus the unit-ordered copies the unit engines read.
enum class ActivationForm { kFp32, kInt8, kInt8Units };

struct PreparedActivations {
  std::vector<int8_t> qa;
  std::vector<float> lane_da, group_da, sum16;
  std::vector<uint8_t> unit_records;
  int zero = 0;  // kInt8Units: the format's symmetric zero point (formats.h), set before preparing
  Activations view{};
};

// Sizes the buffers for m rows of k; prepare_rows then fills rows [r0, r1) (callable in parallel).
void allocate_activations(const float* a, int64_t m, int64_t k, ActivationForm form, PreparedActivations* out);
void prepare_rows(const float* a, int64_t k, ActivationForm form, PreparedActivations* out, int64_t r0, int64_t r1);

}  // namespace clika_kernels

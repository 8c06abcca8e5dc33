// What GgufMatMul may apply to its products before writing them, so a gated MLP's
// gate and up projections leave the op as one activated tensor instead of going through
// Split, Sigmoid and two Muls (four graph nodes a layer, each a pass over the products).
#pragma once

#include <cstdint>

#include "kernel_api.h"

namespace clika_kernels {

enum class Epilogue {
  kNone,    // Y = A @ W^T
  kSwiglu,  // W's first N/2 rows are the gate, the rest the up projection: Y = silu(gate) * up
};

// y[r * half + j] = silu(g) * u with g = full[r * full_stride + j] and
// u = full[r * full_stride + half + j], for rows r < m and j < half.
// silu(g) = g / (1 + e^-g), e^x by a degree-6 polynomial after range reduction (relative
// error below 2e-7). Every ISA runs the same IEEE operations in the same order (no fused
// multiply-adds), so the result is bit for bit the same whichever ISA computes it.
void swiglu_rows(const float* full, int64_t full_stride, int64_t half, float* y, int64_t m, Isa isa);

}  // namespace clika_kernels

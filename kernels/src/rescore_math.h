// HeadRescore's one dot product, written once as plain loops over a 16-float lane array
// (PortableDot); AVX2 and AVX-512 (rescore_avx2.cpp, rescore_avx512.cpp) hold that array
// in registers and give each lane the same operations. No sum is reassociated
// (-ffp-contract=off, no fast-math), so every ISA runs the same IEEE operations in the
// same order and gives the same bits.
#pragma once

#include <cstdint>

#include "rescore.h"

namespace clika_kernels {
namespace rescore_math {

constexpr int kLanes = 16;  // a block is a multiple of this (checked by run_rescore)

// The 16 lanes halved: lanes l and l + 8, then l + 4, l + 2, l + 1.
inline float halved(float* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

// x . row i: each weight dequantized as GatherBlockQuantized does, (code - zero) * scale,
// then multiplied by its activation into lane j % 16, the 16 lanes halved at the end.
struct PortableDot {
  static float row_dot(const RescoreProblem& p, const float* __restrict x, int64_t i) {
    const uint8_t* __restrict codes = p.codes + i * p.k;
    const float* __restrict scales = p.scales + i * p.blocks;
    const uint8_t* zeros = p.zero_points ? p.zero_points + i * p.blocks : nullptr;
    float lanes[kLanes] = {};
    for (int64_t b = 0; b < p.blocks; ++b) {
      const float scale = scales[b];
      const float zero = zeros ? static_cast<float>(zeros[b]) : 128.0f;
      for (int64_t c = b * p.block; c < (b + 1) * p.block; c += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          const float weight = (static_cast<float>(codes[c + l]) - zero) * scale;
          lanes[l] += weight * x[c + l];
        }
      }
    }
    return halved(lanes);
  }
};

// The rows are picked at random from a table larger than the caches: asking for a row a
// few dots ahead overlaps its misses with the dots before it (in SmolLM2-135M's step of 8
// rows, profiled: 0.34-0.36 against 0.38-0.40 ms for the node, three alternations).
constexpr int64_t kAhead = 4;

__attribute__((always_inline)) inline void prefetch_row(const RescoreProblem& p, int64_t i) {
  const char* codes = reinterpret_cast<const char*>(p.codes + i * p.k);
  for (int64_t at = 0; at < p.k; at += 64) __builtin_prefetch(codes + at);
  const char* scales = reinterpret_cast<const char*>(p.scales + i * p.blocks);
  for (int64_t at = 0; at < p.blocks * 4; at += 64) __builtin_prefetch(scales + at);
}

// Dot: static float row_dot(problem, x, i), PortableDot's operations.
template <class Dot>
inline void rescore(const RescoreProblem& p, int64_t token, const int64_t* ids, int64_t count) {
  const float* x = p.x + token * p.k;
  float* out = p.out + token * p.n;
  for (int64_t j = 0; j < count; ++j) {
    if (j + kAhead < count) prefetch_row(p, ids[j + kAhead]);
    out[ids[j]] = Dot::row_dot(p, x, ids[j]);
  }
}

}  // namespace rescore_math
}  // namespace clika_kernels

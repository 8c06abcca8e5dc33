// The outer shape of StepAttention's two inner loops where an ISA has its own blocks: the
// scores of whole blocks of keys by the ISA's block dot and the rest by the portable loop,
// and the weighted values in tiles of up to 4 query heads. Included by attention_avx2.cpp
// and attention_avx512.cpp after their target options, so it compiles for each ISA.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attention_math.h"

namespace clika_kernels {
namespace attention_math {

// Dots::kKeys keys at a time (Dots::store writes one query's dots with them), the portable
// loop for the keys left; the bits are the portable loop's either way.
template <class Dots>
[[gnu::always_inline]] inline void scores_in_blocks(const float* queries, int group, const float* keys,
                                                    int64_t first, int64_t count, int64_t head_dim,
                                                    float* scores, int64_t stride) {
  const int64_t full = count / Dots::kKeys * Dots::kKeys;
  for (int64_t j = 0; j < full; j += Dots::kKeys) {
    const float* block = keys + (first + j) * head_dim;
    for (int g = 0; g < group; ++g) Dots::store(queries + g * head_dim, block, head_dim, scores + g * stride + j);
  }
  PortableLoops::scores(queries, group, keys, first + full, count - full, head_dim, scores + full, stride);
}

// Tile<G>::run computes G heads' values over dims [d0, d0 + Tile<G>::kDims) of the head.
template <template <int> class Tile>
[[gnu::always_inline]] inline void values_in_tiles(const float* weights, int group, const float* values,
                                                   int64_t first, int64_t count, int64_t head_dim, int64_t stride,
                                                   float* out) {
  const float* rows = values + first * head_dim;
  for (int g0 = 0; g0 < group; g0 += 4) {
    const float* w = weights + g0 * stride;
    float* o = out + g0 * head_dim;
    for (int64_t d0 = 0; d0 < head_dim; d0 += Tile<1>::kDims) {
      switch (std::min(4, group - g0)) {
        case 4: Tile<4>::run(w, stride, rows, count, head_dim, d0, o); break;
        case 3: Tile<3>::run(w, stride, rows, count, head_dim, d0, o); break;
        case 2: Tile<2>::run(w, stride, rows, count, head_dim, d0, o); break;
        default: Tile<1>::run(w, stride, rows, count, head_dim, d0, o); break;
      }
    }
  }
}

}  // namespace attention_math
}  // namespace clika_kernels

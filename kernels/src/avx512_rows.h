// The walk of the AVX-512 fp32 engine (avx512_fp32.cpp): a weight row's units and chunks decoded
// in registers (avx512_decode.h), each handed to the engine's accumulators for R activation
// rows at once. Every activation row sees the same sequence of operations whatever R is,
// so a row's result never depends on the rows computed beside it.
// Included after each engine's target options, so it compiles for that ISA.
#pragma once

#include <algorithm>

#include "avx512_decode.h"
#include "formats.h"
#include "kernel_api.h"

namespace clika_kernels {
namespace {

// Rows: void unit(int64_t k0, int groups, const float* scale16, const float* bias16);
//       void chunk(__m512i codes, const uint8_t* unit, int64_t k, int c, bool half,
//                  const float* scale16, const float* bias16);
// (Rows that read the unit's bytes themselves leave codes unused, and the compiler drops them.)
//       void finish(float* out);
template <class Format, class Rows>
inline void walk_row(const uint8_t* row, int64_t k, Rows& rows) {
  alignas(64) float scale16[kMaxUnitGroups];
  alignas(64) float bias16[kMaxUnitGroups];
  const int64_t blocks = k / Format::kWeights;
  for (int64_t b = 0; b < blocks; b += Format::kUnitBlocks) {
    const int count = static_cast<int>(std::min<int64_t>(Format::kUnitBlocks, blocks - b));
    const uint8_t* unit = row + b * Format::kBytes;
    const int64_t k0 = b * Format::kWeights;
    const int weights = count * Format::kWeights;
    Format::scales(unit, count, scale16, bias16);
    rows.unit(k0, weights / 16, scale16, bias16);
    for (int c = 0; 64 * c < weights; ++c) {
      const bool half = weights - 64 * c < 64;
      rows.chunk(Format::codes(unit, c, half), unit, k0 + 64 * c, c, half, scale16, bias16);
    }
  }
}

// Rows<R>(const Problem&, const Activations&, int64_t m0) computes activation rows m0..m0+R-1.
template <class Format, template <int> class Rows, int R>
inline void tile(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
  Rows<R> rows(p, x, m0);
  walk_row<Format>(p.b + n * p.row_bytes, p.k, rows);
  float out[R];
  rows.finish(out);
  for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n] = out[r];
}

template <class Format, template <int> class Rows>
inline void rows_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    int64_t m = 0;
    for (; m + 4 <= p.m; m += 4) tile<Format, Rows, 4>(p, x, n, m);
    switch (p.m - m) {
      case 3: tile<Format, Rows, 3>(p, x, n, m); break;
      case 2: tile<Format, Rows, 2>(p, x, n, m); break;
      case 1: tile<Format, Rows, 1>(p, x, n, m); break;
      default: break;
    }
  }
}

inline float reduce_pair(__m512 a, __m512 b) { return _mm512_reduce_add_ps(_mm512_add_ps(a, b)); }

}  // namespace
}  // namespace clika_kernels

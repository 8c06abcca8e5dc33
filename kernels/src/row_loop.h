// The loop every engine shares: decode one stored row, let the engine prepare it, then
// compute it against the activation rows in tiles of up to four. Included by each ISA's
// source file after its target options, so it compiles (and vectorizes) for that ISA.
#pragma once

#include "formats.h"
#include "kernel_api.h"

namespace clika_kernels {
namespace {

// Engine: static void prepare(const Problem&, const RowScratch&);
//         template <int R> static void dot(const Problem&, const Activations&,
//                                          const RowScratch&, int64_t m0, float* out);
// dot<R> computes rows m0..m0+R-1; each row's operations are those of dot<1>.
template <class Engine>
inline void run_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    decode_row(p.type, p.b + n * p.row_bytes, p.k, s.codes, s.scale16, s.bias16);
    Engine::prepare(p, s);
    float out[4];
    int64_t m = 0;
    for (; m + 4 <= p.m; m += 4) {
      Engine::template dot<4>(p, x, s, m, out);
      for (int r = 0; r < 4; ++r) p.y[(m + r) * p.n + n] = out[r];
    }
    for (; m < p.m; ++m) {
      Engine::template dot<1>(p, x, s, m, out);
      p.y[m * p.n + n] = out[0];
    }
  }
}

}  // namespace
}  // namespace clika_kernels

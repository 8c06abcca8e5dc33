// AVX-512 fp32 engine, weights decoded in registers: each 16-group of a chunk's codes is
// widened to fp32 and made a weight with one FMA (code * scale + bias, as decode_row
// defines it), then multiplied into every activation row with one FMA each. The 4-bit
// formats look their weights up instead: a 16-entry table of code * scale + bias per
// 32 weights that share a scale (the same FMA, once per code value) indexed by the
// nibbles in place (vpermps reads the low 4 bits of each lane), so a weight costs a
// lookup, not a widen and convert.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

#include "avx512_fp32_batch.h"
#include "avx512_fp32_panel.h"
#include "avx512_fp32_rows.h"

namespace clika_kernels {
namespace {

constexpr int64_t kDirectRows = 8;  // the most activation rows the direct walks take

template <template <int> class Rows>
void few_rows_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    switch (p.m) {
      case 4: Rows<4>::run(p, x, n, 0); break;
      case 3: Rows<3>::run(p, x, n, 0); break;
      case 2: Rows<2>::run(p, x, n, 0); break;
      default: Rows<1>::run(p, x, n, 0); break;
    }
  }
}

template <class Format, template <int> class Rows>
void fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (p.m > 4) {
    panel_range<Format>(p, x, s, n0, n1);
  } else {
    rows_range<Format, Rows>(p, x, n0, n1);
  }
}

// The 4-bit formats walk their blocks directly at a few rows (BlockRows, SuperRows) and at
// a batch's (BlockPasses, SuperPasses).
template <class Format, template <int> class Rows, class Passes>
void direct_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (p.m > kDirectRows) {
    panel_range<Format>(p, x, s, n0, n1);
  } else if (p.m > 4) {
    batch_rows_range<Passes>(p, x, n0, n1);
  } else {
    few_rows_range<Rows>(p, x, n0, n1);
  }
}

}  // namespace

void avx512_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  switch (p.type) {
    case kQ4_0: direct_fp32_range<Q4_0Blocks, Blocks<Q4_0Blocks>::Rows, BlockPassRows<Q4_0Blocks>>(p, x, s, n0, n1); break;
    case kQ4_1: direct_fp32_range<Q4_1Blocks, Blocks<Q4_1Blocks>::Rows, BlockPassRows<Q4_1Blocks>>(p, x, s, n0, n1); break;
    case kQ4_K: direct_fp32_range<Q4_KBlocks, SuperRows, SuperPassRows>(p, x, s, n0, n1); break;
    case kQ5_0: fp32_range<Q5_0Blocks, Fp32Rows>(p, x, s, n0, n1); break;
    case kQ5_1: fp32_range<Q5_1Blocks, Fp32Rows>(p, x, s, n0, n1); break;
    case kQ8_0: fp32_range<Q8_0Blocks, Fp32Rows>(p, x, s, n0, n1); break;
    case kQ5_K: fp32_range<Q5_KBlocks, Fp32Rows>(p, x, s, n0, n1); break;
    case kQ6_K: fp32_range<Q6_KBlocks, Fp32Rows>(p, x, s, n0, n1); break;
    default: break;
  }
}

}  // namespace clika_kernels
#endif

// The AVX-512 fp32 engine at a batch's 5 to 8 activation rows (the 4-bit formats).
// Included by avx512_fp32.cpp after its target options, so it compiles for that ISA.
#pragma once

#include "avx512_fp32_pairs.h"
#include "avx512_fp32_rows.h"

namespace clika_kernels {
namespace {

// 5 to 8 activation rows (a batch of decoding sequences) on the 4-bit formats: NW weight
// rows decoded in registers at once, each of an output's two accumulators run as its own
// pass over a piece of the row (the low nibbles' accumulator, then the high ones'), so
// NW x R accumulators fill the registers and every activation load feeds NW FMAs. Each
// (m, n) meets the same weights in the same order as in BlockRows / SuperRows, so the
// same bits. At 8 rows, against one weight row with both accumulators (BlockRows<8>, a
// load per FMA), alternating in one process: Q4_1 576x3072 247 against 311 us, 1536x576
// 145 against 171, Q4_K 1536x8960 1.80 against 2.34 ms. Three weight rows (24
// accumulators) ran 576x3072 in 284-291 us.
constexpr int kPassRows = 2;
// Blocks a piece of both passes: 8 activation rows' 512 weights (16 KiB) stay in L1 for the
// second pass (a whole row of SmolLM2's down matrix, 8 x 6 KiB, did not).
constexpr int64_t kPassBlocks = 16;
static_assert(kPassBlocks <= kScalePiece, "a piece's scales are one BlockScales load");

// One accumulator vector per (weight row, activation row) of a pass.
template <int NW, int R>
using Sums = __m512[NW][R];

// acc[w][r] += weights[w] * the 16 activations of row r from k: each activation vector
// loaded once for the NW FMAs (GCC folds the load into each FMA otherwise).
template <int NW, int R>
[[gnu::always_inline]] inline void multiply_rows(const __m512 (&weights)[NW], const float* const* a, int64_t k,
                                                 Sums<NW, R>& acc) {
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
    __m512 x = _mm512_loadu_ps(a[r] + k);
    asm("" : "+v"(x));
    _Pragma("GCC unroll 3") for (int w = 0; w < NW; ++w) acc[w][r] = _mm512_fmadd_ps(weights[w], x, acc[w][r]);
  }
}

// What every pass tile shares: its weight rows and activation rows, both passes' sums
// from zero, `walk(rows, a, low, high)` running the passes, the outputs stored.
template <int NW, int R, class Walk>
[[gnu::always_inline]] inline void run_passes(const Problem& p, const Activations& x, int64_t n, int64_t m0,
                                              const Walk& walk) {
  const uint8_t* rows[NW];
  const float* a[R];
  for (int w = 0; w < NW; ++w) rows[w] = p.b + (n + w) * p.row_bytes;
  for (int r = 0; r < R; ++r) a[r] = x.a + (m0 + r) * p.k;
  Sums<NW, R> low, high;
  for (int w = 0; w < NW; ++w) {
    for (int r = 0; r < R; ++r) low[w][r] = high[w][r] = _mm512_setzero_ps();
  }
  walk(rows, a, low, high);
  store_pairs<NW, R>(p, n, m0, low, high);
}

template <class Format, int NW, int R>
struct BlockPasses {
  // Blocks b0..b0+count-1 of one pass, onto the accumulators in `saved`.
  template <int Pass>
  [[gnu::always_inline]] static void pass(const uint8_t* const* rows, const float* const* a, int64_t b0, int count,
                                          const BlockScales<Format>* scales, Sums<NW, R>& saved) {
    __m512 acc[NW][R];  // local, so they stay in registers
    for (int w = 0; w < NW; ++w) {
      for (int r = 0; r < R; ++r) acc[w][r] = saved[w][r];
    }
    const __m512 codes16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int b = 0; b < count; ++b) {
      __m512 weights[NW];
      _Pragma("GCC unroll 3") for (int w = 0; w < NW; ++w) {
        const __m512 table = _mm512_fmadd_ps(codes16, _mm512_set1_ps(scales[w].d[b]), _mm512_set1_ps(scales[w].m[b]));
        const uint8_t* run = Format::run(rows[w] + (b0 + b) * Format::kBytes, 0, 0);
        __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(run)));
        if constexpr (Pass == 1) q = _mm512_srli_epi32(q, 4);
        weights[w] = _mm512_permutexvar_ps(q, table);
      }
      multiply_rows<NW, R>(weights, a, 32 * (b0 + b) + 16 * Pass, acc);
    }
    for (int w = 0; w < NW; ++w) {
      for (int r = 0; r < R; ++r) saved[w][r] = acc[w][r];
    }
  }

  static void run(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
    run_passes<NW, R>(p, x, n, m0, [&p](const uint8_t* const* rows, const float* const* a, Sums<NW, R>& low,
                                        Sums<NW, R>& high) {
      BlockScales<Format> scales[NW];
      const int64_t blocks = p.k / 32;
      for (int64_t b0 = 0; b0 < blocks; b0 += kPassBlocks) {
        const int count = static_cast<int>(std::min<int64_t>(kPassBlocks, blocks - b0));
        for (int w = 0; w < NW; ++w) scales[w].load(rows[w] + b0 * Format::kBytes, count);
        pass<0>(rows, a, b0, count, scales, low);
        pass<1>(rows, a, b0, count, scales, high);
      }
    });
  }
};

template <class Format>
struct BlockPassRows {
  template <int NW, int R>
  using Tile = BlockPasses<Format, NW, R>;
};

// Q4_K's passes: per super-block, chunk c's runs i give the low nibbles (sub-block 2c,
// into the first accumulator) and the high ones (2c + 1, the second), as SuperRows reads them.
template <int NW, int R>
struct SuperPasses {
  // One super-block (weights k0..k0+255) of one pass, onto the accumulators in `saved`.
  template <int Pass>
  [[gnu::always_inline]] static void pass(const uint8_t* const* units, const float* const* a, int64_t k0,
                                          const float (&scale16)[NW][kMaxUnitGroups],
                                          const float (&bias16)[NW][kMaxUnitGroups], Sums<NW, R>& saved) {
    __m512 acc[NW][R];  // local, so they stay in registers
    for (int w = 0; w < NW; ++w) {
      for (int r = 0; r < R; ++r) acc[w][r] = saved[w][r];
    }
    const __m512 codes16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; ++c) {
      __m512 tables[NW];
      for (int w = 0; w < NW; ++w) {
        tables[w] = _mm512_fmadd_ps(codes16, _mm512_set1_ps(scale16[w][4 * c + 2 * Pass]),
                                    _mm512_set1_ps(bias16[w][4 * c + 2 * Pass]));
      }
      _Pragma("GCC unroll 2") for (int i = 0; i < 2; ++i) {
        __m512 weights[NW];
        _Pragma("GCC unroll 3") for (int w = 0; w < NW; ++w) {
          __m512i q =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Q4_KBlocks::run(units[w], c, i))));
          if constexpr (Pass == 1) q = _mm512_srli_epi32(q, 4);
          weights[w] = _mm512_permutexvar_ps(q, tables[w]);
        }
        multiply_rows<NW, R>(weights, a, k0 + 64 * c + 16 * i + 32 * Pass, acc);
      }
    }
    for (int w = 0; w < NW; ++w) {
      for (int r = 0; r < R; ++r) saved[w][r] = acc[w][r];
    }
  }

  static void run(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
    run_passes<NW, R>(p, x, n, m0, [&p](const uint8_t* const* rows, const float* const* a, Sums<NW, R>& low,
                                        Sums<NW, R>& high) {
      for (int64_t k0 = 0; k0 < p.k; k0 += 256) {
        alignas(64) float scale16[NW][kMaxUnitGroups];
        alignas(64) float bias16[NW][kMaxUnitGroups];
        const uint8_t* units[NW];
        for (int w = 0; w < NW; ++w) {
          units[w] = rows[w] + k0 / 256 * Q4_KBlocks::kBytes;
          Q4_KBlocks::scales(units[w], 1, scale16[w], bias16[w]);
        }
        asm volatile("" : : "r"(scale16), "r"(bias16) : "memory");  // read back as broadcasts (see SuperRows)
        pass<0>(units, a, k0, scale16, bias16, low);
        pass<1>(units, a, k0, scale16, bias16, high);
      }
    });
  }
};

struct SuperPassRows {
  template <int NW, int R>
  using Tile = SuperPasses<NW, R>;
};

template <class Passes, int R>
void pass_rows_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + kPassRows <= n1; n += kPassRows) Passes::template Tile<kPassRows, R>::run(p, x, n, 0);
  for (; n < n1; ++n) Passes::template Tile<1, R>::run(p, x, n, 0);
}

template <class Passes>
void batch_rows_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  switch (p.m) {
    case 8: pass_rows_range<Passes, 8>(p, x, n0, n1); break;
    case 7: pass_rows_range<Passes, 7>(p, x, n0, n1); break;
    case 6: pass_rows_range<Passes, 6>(p, x, n0, n1); break;
    default: pass_rows_range<Passes, 5>(p, x, n0, n1); break;
  }
}

}  // namespace
}  // namespace clika_kernels

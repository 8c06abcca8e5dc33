// The AVX-512 fp32 engine's prefill: more activation rows than the in-register walks take.
// Included by avx512_fp32.cpp after its target options, so it compiles for that ISA.
#pragma once

#include "avx512_fp32_pairs.h"
#include "avx512_fp32_rows.h"

namespace clika_kernels {
namespace {

// Prefill (more activation rows than the in-register walk takes): the task's weight rows
// decoded once into fp32 scratch, each weight the same fma(code, scale, bias) the walk
// forms, then read back by 4 weight rows x 4 activation rows at a time, K in pieces of
// kPiece weights so a tile's activations stay in L1. Each (m, n) meets its 16-groups in
// the walk's order into the walk's two accumulators (kSteps: the group of each step of a
// chunk, step I into accumulator I & 1), so the result is the in-register one, bit for
// bit. The two accumulators never meet before the final sum, so each is run as its own
// pass (steps 0 and 2, then 1 and 3): a pass holds one accumulator per output, so 16
// outputs share each load. Against the earlier 2 x 4 tile with both accumulators (6
// loads for 8 FMAs), alternating builds, kernel_gemv.py: Q4_1 576x3072 at 64 rows
// 1.66-1.70 against 2.36 ms, at 256 rows 6.2-6.4 against 6.7; 1536x576 0.85 against
// 1.25-1.27 and 3.1-3.2 against 3.7. A 6 x 4 tile (24 accumulators) was slower at
// K = 576 (1.88-2.05 ms at 64 rows): its passes are short, 18 steps.
template <class Format>
struct Steps {
  static constexpr int kGroups[4] = {0, 1, 2, 3};
};
template <>
struct Steps<Q4_KBlocks> {
  static constexpr int kGroups[4] = {0, 2, 1, 3};
};

constexpr int64_t kPiece = 1024;
constexpr int kPanelRows = 4;  // weight rows of a tile
constexpr int kPanelActs = 4;  // activation rows of a tile
// A weight row's saved accumulators: one per activation row and pass.
constexpr int kRowStates = 2 * kPanelActs;
static_assert(kRowStates * sizeof(__m512) <= kTileStateBytes, "RowScratch::tile_states is sized by kTileStateBytes");

// walk_row's Rows that writes each chunk's weights (group_weights, as Fp32Rows forms them)
// in the order the passes read them: pass 0's groups of every chunk, then pass 1's, each
// chunk's two (steps P and P + 2) side by side, so a pass streams its half of the row
// densely (laid out as the row, each pass's loads touched every other cache line and the
// prefetchers fetched both).
template <class Format>
struct PanelWriter {
  float* out;
  int64_t half_row;  // K / 2: where pass 1's weights start

  template <int G>
  [[gnu::always_inline]] void put(__m512 weights, int c) {
    constexpr int kStep = Steps<Format>::kGroups[0] == G   ? 0
                          : Steps<Format>::kGroups[1] == G ? 1
                          : Steps<Format>::kGroups[2] == G ? 2
                                                           : 3;
    _mm512_storeu_ps(out + (kStep & 1) * half_row + 32 * c + 16 * (kStep >> 1), weights);
  }

  void unit(int64_t, int, const float*, const float*) {}
  void chunk(__m512i codes, const uint8_t*, int64_t k, int c, bool half, const float* scale16, const float* bias16) {
    const float* scale4 = scale16 + 4 * c;
    const float* bias4 = bias16 + 4 * c;
    const int chunk = static_cast<int>(k / 64);
    put<0>(group_weights<0>(codes, scale4, bias4), chunk);
    put<1>(group_weights<1>(codes, scale4, bias4), chunk);
    if (half) return;
    put<2>(group_weights<2>(codes, scale4, bias4), chunk);
    put<3>(group_weights<3>(codes, scale4, bias4), chunk);
  }
};

template <class Format>
void decode_weights(const uint8_t* row, int64_t k, float* out) {
  PanelWriter<Format> writer{out, k / 2};
  walk_row<Format>(row, k, writer);
}

// NW weight rows (n..) x R activation rows (m0..): pass `pass`'s accumulators over k0..k1.
// state holds, per weight row, kRowStates vectors: [pass * kPanelActs + r].
template <class Format, int NW, int R>
struct PanelTile {
  __m512 acc[NW][R];

  [[gnu::always_inline]] void step(const float* const* wrow, int64_t at, const float* const* arow, int64_t k) {
    __m512 a[R];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) a[r] = _mm512_loadu_ps(arow[r] + k);
    _Pragma("GCC unroll 4") for (int w = 0; w < NW; ++w) {
      const __m512 wv = _mm512_loadu_ps(wrow[w] + at);
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) acc[w][r] = _mm512_fmadd_ps(wv, a[r], acc[w][r]);
    }
  }

  static void run(const Problem& p, const Activations& x, const float* panel, int64_t n0, int64_t n, int64_t m0,
                  int64_t k0, int64_t k1, int pass, __m512* state) {
    PanelTile t;
    _Pragma("GCC unroll 4") for (int w = 0; w < NW; ++w) {
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        t.acc[w][r] = k0 == 0 ? _mm512_setzero_ps() : state[w * kRowStates + pass * kPanelActs + r];
      }
    }
    const float* wrow[NW];
    const float* arow[R];
    for (int w = 0; w < NW; ++w) wrow[w] = panel + (n - n0 + w) * p.k + pass * (p.k / 2);
    for (int r = 0; r < R; ++r) arow[r] = x.a + (m0 + r) * p.k;
    const int first = 16 * Steps<Format>::kGroups[pass];
    const int second = 16 * Steps<Format>::kGroups[pass + 2];
    // Chunk c's weights sit at c / 2 of the pass's half row; a last half chunk has one group.
    const int64_t full_end = std::min(k1, p.k - p.k % 64);
    int64_t c = k0;
    for (; c < full_end; c += 64) {
      t.step(wrow, c / 2, arow, c + first);
      t.step(wrow, c / 2 + 16, arow, c + second);
    }
    if (c < k1) t.step(wrow, c / 2, arow, c + first);
    if (k1 < p.k || pass == 0) {
      for (int w = 0; w < NW; ++w) {
        for (int r = 0; r < R; ++r) state[w * kRowStates + pass * kPanelActs + r] = t.acc[w][r];
      }
      return;
    }
    t.store(p, n, m0, state);
  }

  // The last piece of pass 1: each output is reduce_pair(pass 0's, pass 1's accumulator).
  [[gnu::always_inline]] void store(const Problem& p, int64_t n, int64_t m0, const __m512* state) const {
    __m512 first[NW][R];
    for (int w = 0; w < NW; ++w) {
      for (int r = 0; r < R; ++r) first[w][r] = state[w * kRowStates + r];
    }
    store_pairs<NW, R>(p, n, m0, first, acc);
  }
};

template <class Format, int R>
void panel_rows(int weight_rows, const Problem& p, const Activations& x, const float* panel, int64_t n0, int64_t n,
                int64_t m0, int64_t k0, int64_t k1, int pass, __m512* state) {
  switch (weight_rows) {
    case 4: PanelTile<Format, 4, R>::run(p, x, panel, n0, n, m0, k0, k1, pass, state); break;
    case 3: PanelTile<Format, 3, R>::run(p, x, panel, n0, n, m0, k0, k1, pass, state); break;
    case 2: PanelTile<Format, 2, R>::run(p, x, panel, n0, n, m0, k0, k1, pass, state); break;
    default: PanelTile<Format, 1, R>::run(p, x, panel, n0, n, m0, k0, k1, pass, state); break;
  }
}

// One activation tile (R rows from m0) against the task's decoded rows n0..n1: for each K
// piece, pass 0 then pass 1 over every weight tile, so the piece's activations stay in L1.
template <class Format, int R>
void panel_acts(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1, int64_t m0) {
  __m512* states = reinterpret_cast<__m512*>(s.tile_states);
  for (int64_t k0 = 0; k0 < p.k; k0 += kPiece) {
    const int64_t k1 = std::min(p.k, k0 + kPiece);
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t n = n0; n < n1; n += kPanelRows) {
        const int weight_rows = static_cast<int>(std::min<int64_t>(kPanelRows, n1 - n));
        panel_rows<Format, R>(weight_rows, p, x, s.panel, n0, n, m0, k0, k1, pass, states + (n - n0) * kRowStates);
      }
    }
  }
}

template <class Format>
void panel_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) decode_weights<Format>(p.b + n * p.row_bytes, p.k, s.panel + (n - n0) * p.k);
  for (int64_t m0 = 0; m0 < p.m; m0 += kPanelActs) {
    switch (std::min<int64_t>(kPanelActs, p.m - m0)) {
      case 4: panel_acts<Format, 4>(p, x, s, n0, n1, m0); break;
      case 3: panel_acts<Format, 3>(p, x, s, n0, n1, m0); break;
      case 2: panel_acts<Format, 2>(p, x, s, n0, n1, m0); break;
      default: panel_acts<Format, 1>(p, x, s, n0, n1, m0); break;
    }
  }
}

}  // namespace
}  // namespace clika_kernels

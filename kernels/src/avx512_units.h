// The AVX-512 int8 engines' walk (avx512_vnni.cpp, avx512_int8.cpp): a weight row is
// decoded a unit of 256 weights at a time, its codes straight into lane order
// (avx512_lane_codes.h): lane 4i + d of every chunk of 64 holds weights of the 16-group
// 4d + i. The activations are stored in the same order (avx512_records.cpp), so the four
// integer dot products of a unit accumulate, exactly, each group's whole sum in one int32
// lane: per unit and activation row, four integer dots, one convert and one or two
// multiply-adds scale the sixteen groups at once. A tile of up to 8 activation rows
// shares a unit decoded in registers; for more, each unit is decoded once into scratch
// and read back per tile of rows. Either way every activation row sees the same
// operations on the same values, so a row's result never depends on M or on the rows
// computed beside it.
// Included after each engine's target options, so it compiles for that ISA.
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "avx512_decode.h"
#include "avx512_lane_codes.h"
#include "formats.h"
#include "kernel_api.h"
#include "row_tiles.h"

namespace clika_kernels {
namespace {

// One unit of a weight row, ready for every activation row.
struct alignas(64) DecodedUnit {
  __m512i codes[4];   // 256 codes in lane order
  __m512 lane_scale;  // the weight scale of each lane's group
  __m512 bias;        // the bias of each 16-group, in group order
};
static_assert(sizeof(DecodedUnit) == kUnitScratchBytes, "RowScratch::units is sized by kUnitScratchBytes");

// A unit of `blocks` blocks (fewer than a full unit only at the end of a 32-weight row).
template <class Format>
[[gnu::always_inline]] inline void decode_unit(const uint8_t* unit, int blocks, DecodedUnit* out) {
  LaneCodes<Format>::scales(unit, blocks, &out->lane_scale, &out->bias);
  LaneCodes<Format>::decode(unit, blocks, out->codes);
}

// Dot: static __m512i add(__m512i acc, __m512i codes_u8, __m512i acts_s8) -> acc plus 16
// exact int32 sums of 4 products. Symmetric formats start each unit's dot from the
// record's -zero * (sum of q) (the zero point in integers, exact), so they need no bias.
template <class D, bool S>
struct Arith {
  using Dot = D;
  static constexpr bool kSymmetric = S;
};

// A: an Arith, the integer dot and whether the format is symmetric.
template <class A, int R>
struct UnitRows {
  using Dot = typename A::Dot;
  static constexpr bool Symmetric = A::kSymmetric;
  const uint8_t* records;  // the tile's first row, unit 0
  __m512 acc[R];
  __m512 bias[R];

  UnitRows(const Activations& x, int64_t m0)
      : records(x.unit_records + (m0 / kRecordRows) * x.units * kRecordRows * kUnitRecordBytes) {
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) { acc[r] = bias[r] = _mm512_setzero_ps(); }
  }

  [[gnu::always_inline]] inline void add(const DecodedUnit& w, int64_t u) {
    const uint8_t* unit = records + u * R * kUnitRecordBytes;  // R: the tile's rows (kernel_api.h)
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      const uint8_t* a = unit + r * kUnitRecordBytes;
      __m512i dot = Symmetric ? _mm512_load_si512(a + 320) : _mm512_setzero_si512();
      dot = Dot::add(dot, w.codes[0], _mm512_load_si512(a));
      dot = Dot::add(dot, w.codes[1], _mm512_load_si512(a + 64));
      dot = Dot::add(dot, w.codes[2], _mm512_load_si512(a + 128));
      dot = Dot::add(dot, w.codes[3], _mm512_load_si512(a + 192));
      const __m512 scale = _mm512_mul_ps(w.lane_scale, _mm512_load_ps(reinterpret_cast<const float*>(a + 256)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
      if (!Symmetric) {
        bias[r] = _mm512_fmadd_ps(w.bias, _mm512_load_ps(reinterpret_cast<const float*>(a + 320)), bias[r]);
      }
    }
  }

  void save(__m512* out) const {
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      out[2 * r] = acc[r];
      out[2 * r + 1] = bias[r];
    }
  }

  void resume(const __m512* in) {
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      acc[r] = in[2 * r];
      bias[r] = in[2 * r + 1];
    }
  }

  void store(const Problem& p, int64_t n, int64_t m0) const {
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      const float main = _mm512_reduce_add_ps(acc[r]);
      p.y[(m0 + r) * p.n + n] = Symmetric ? main : main + _mm512_reduce_add_ps(bias[r]);
    }
  }
};

constexpr int kTileRows = 8;
static_assert(kTileRows == kRecordRows, "a tile of rows reads one record tile (kernel_api.h)");
// 8 rows x 8 units x 384 bytes of activations: 24 KiB, within L1.
constexpr int64_t kChunkUnits = 8;
static_assert(2 * kTileRows * sizeof(__m512) == kTileStateBytes, "RowScratch::tile_states is sized by kTileStateBytes");

template <class Format>
struct UnitWalk {
  const uint8_t* row;
  int64_t blocks;

  int64_t units() const { return (blocks + Format::kUnitBlocks - 1) / Format::kUnitBlocks; }
  [[gnu::always_inline]] void decode(int64_t u, DecodedUnit* out) const {
    const int64_t b = u * Format::kUnitBlocks;
    decode_unit<Format>(row + b * Format::kBytes, static_cast<int>(std::min<int64_t>(Format::kUnitBlocks, blocks - b)),
                        out);
  }
};

// Rows m0..m0+R-1 of output n, each unit decoded in registers.
template <class Format, class Dot, int R>
inline void tile_decoding(const Problem& p, const Activations& x, const UnitWalk<Format>& walk, int64_t n,
                          int64_t m0) {
  UnitRows<Dot, R> rows(x, m0);
  for (int64_t u = 0; u < walk.units(); ++u) {
    DecodedUnit w;
    walk.decode(u, &w);
    rows.add(w, u);
  }
  rows.store(p, n, m0);
}

template <class Format>
struct Decoding {
  template <class Dot, int R>
  struct Tile {
    static void run(const Problem& p, const Activations& x, const UnitWalk<Format>& walk, int64_t n, int64_t m0) {
      tile_decoding<Format, Dot, R>(p, x, walk, n, m0);
    }
  };
};

// Rows m0..m0+R-1 of outputs n0..n1 from their units decoded into scratch, kChunkUnits
// units at a time: the tile's activations for a chunk stay in L1 while every output of
// the range goes through it, each output's accumulators kept in `saved` between chunks
// (stored and reloaded unchanged, so the operations are those of the in-register path).
template <class Dot, int R>
struct DecodedTile {
  static void run(const Problem& p, const Activations& x, const DecodedUnit* units, int64_t count, int64_t n0,
                  int64_t n1, int64_t m0, __m512* saved) {
    for (int64_t u0 = 0; u0 < count; u0 += kChunkUnits) {
      const int64_t u1 = std::min(count, u0 + kChunkUnits);
      for (int64_t n = n0; n < n1; ++n) {
        UnitRows<Dot, R> rows(x, m0);
        __m512* state = saved + (n - n0) * 2 * kTileRows;
        if (u0 > 0) rows.resume(state);
        const DecodedUnit* w = units + (n - n0) * count;
        for (int64_t u = u0; u < u1; ++u) rows.add(w[u], u);
        if (u1 == count) {
          rows.store(p, n, m0);
        } else {
          rows.save(state);
        }
      }
    }
  }
};

// A few activation rows: each unit decoded in registers and used at once. More: the
// range's rows decoded once into scratch, then read back per tile of rows.
template <class Format, class Dot>
inline void units_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  const int64_t blocks = p.k / Format::kWeights;
  if (p.m <= kTileRows) {
    for (int64_t n = n0; n < n1; ++n) {
      const UnitWalk<Format> walk{p.b + n * p.row_bytes, blocks};
      tile_of<Dot, Decoding<Format>::template Tile>(static_cast<int>(p.m), p, x, walk, n, int64_t{0});
    }
    return;
  }
  DecodedUnit* units = reinterpret_cast<DecodedUnit*>(s.units);
  const int64_t count = UnitWalk<Format>{p.b, blocks}.units();
  for (int64_t n = n0; n < n1; ++n) {
    const UnitWalk<Format> walk{p.b + n * p.row_bytes, blocks};
    for (int64_t u = 0; u < count; ++u) walk.decode(u, units + (n - n0) * count + u);
  }
  __m512* saved = reinterpret_cast<__m512*>(s.tile_states);
  for (int64_t m0 = 0; m0 < p.m; m0 += kTileRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kTileRows, p.m - m0));
    tile_of<Dot, DecodedTile>(rows, p, x, static_cast<const DecodedUnit*>(units), count, n0, n1, m0, saved);
  }
}

template <class Dot>
inline void run_units(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  using Biased = Arith<Dot, false>;
  using Symmetric = Arith<Dot, true>;
  switch (p.type) {
    case kQ4_0: units_range<Q4_0Blocks, Symmetric>(p, x, s, n0, n1); break;
    case kQ4_1: units_range<Q4_1Blocks, Biased>(p, x, s, n0, n1); break;
    case kQ5_0: units_range<Q5_0Blocks, Symmetric>(p, x, s, n0, n1); break;
    case kQ5_1: units_range<Q5_1Blocks, Biased>(p, x, s, n0, n1); break;
    case kQ8_0: units_range<Q8_0Blocks, Symmetric>(p, x, s, n0, n1); break;
    case kQ4_K: units_range<Q4_KBlocks, Biased>(p, x, s, n0, n1); break;
    case kQ5_K: units_range<Q5_KBlocks, Biased>(p, x, s, n0, n1); break;
    case kQ6_K: units_range<Q6_KBlocks, Symmetric>(p, x, s, n0, n1); break;
    default: break;
  }
}

}  // namespace
}  // namespace clika_kernels

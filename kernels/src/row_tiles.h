// A runtime count of activation rows (1 to 8) as the compile-time R of a tile template, so
// each tile keeps its R rows' accumulators in registers. Shared by the AVX-512 int8 unit
// engines (avx512_units.h) and the 16-bit split (avx512_split16.cpp).
#pragma once

namespace clika_kernels {
namespace {

// Tile<Kind, R>::run(args...) for R = rows; rows outside 1..8 run nothing.
template <class Kind, template <class, int> class Tile, class... Args>
inline void tile_of(int rows, Args&&... args) {
  switch (rows) {
    case 8: Tile<Kind, 8>::run(args...); break;
    case 7: Tile<Kind, 7>::run(args...); break;
    case 6: Tile<Kind, 6>::run(args...); break;
    case 5: Tile<Kind, 5>::run(args...); break;
    case 4: Tile<Kind, 4>::run(args...); break;
    case 3: Tile<Kind, 3>::run(args...); break;
    case 2: Tile<Kind, 2>::run(args...); break;
    case 1: Tile<Kind, 1>::run(args...); break;
    default: break;
  }
}

}  // namespace
}  // namespace clika_kernels

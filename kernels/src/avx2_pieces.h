// The AVX2 engines' direct walks: a weight row's GGUF blocks read in place, 32 weights (a
// "piece": a block, or a K-quant sub-block) at a time, each piece handed to the engine with
// its codes still packed and the scale and bias they share (weight = scale * code + bias).
// Nothing of the row goes through memory but its own bytes; the engines widen the codes
// as they need them (fp32 lanes, or bytes for vpmaddubsw).
//
// A Format here offers
//   static constexpr bool kSigned   codes are signed (Q8_0, Q6_K: weight = scale * q, no bias)
//   static constexpr bool kSplit    the piece's two 16-groups have scales of their own (Q6_K)
//   template <class Visit> static void walk(const uint8_t* row, int64_t k, Visit& visit)
// calling visit.piece(parity, b, piece, scales) for piece b = 0, 1, ... in order (parity an
// std::integral_constant<int, b & 1> the engines use to alternate accumulators: every Even
// piece is followed by its Odd one, or is a Lone one; scales a
// Scales, equal halves unless kSplit), and, unless kSigned, each piece's bias once: for 8
// pieces b0..b0+7 at a time as visit.bias8(b0, __m256), or visit.bias(b, float).
// Included after each engine's target options.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "avx2_common.h"

namespace clika_kernels {
namespace {

using Even = std::integral_constant<int, 0>;
using Odd = std::integral_constant<int, 1>;
// A piece with no Odd partner after it (the last few blocks of a row, one by one): the fp32
// engine takes it as an Even one, the int8 engine, which combines Even/Odd pairs, alone.
struct Lone : Even {};

struct Scales {
  float lo, hi;  // of weights 0-15 and 16-31
  // Where the walk stored them, the next piece's after (the int8 engine loads a pair's at
  // once): lo (lo == hi) for one-scale formats, [lo, hi] for split ones; null for a Lone piece.
  const float* at;
};

inline __m256i widen8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

// Q4_0 / Q4_1: 16 bytes, weight j the low nibble of byte j, weight j + 16 its high nibble.
struct NibblePiece {
  const uint8_t* qs;
  void floats(__m256* c) const {
    const __m256i low4 = _mm256_set1_epi32(0x0f);
    const __m256i q0 = widen8(qs), q1 = widen8(qs + 8);
    c[0] = _mm256_cvtepi32_ps(_mm256_and_si256(q0, low4));
    c[1] = _mm256_cvtepi32_ps(_mm256_and_si256(q1, low4));
    c[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(q0, 4));
    c[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(q1, 4));
  }
  __m256i bytes() const {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i low4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
  }
};

// Q4_K: 32 bytes, weight j the low (or, for the sub-block after, the high) nibble of byte j.
template <bool High>
struct HalfBytePiece {
  const uint8_t* q;
  void floats(__m256* c) const {
    _Pragma("GCC unroll 4") for (int v = 0; v < 4; ++v) {
      const __m256i w = widen8(q + 8 * v);
      c[v] = _mm256_cvtepi32_ps(High ? _mm256_srli_epi32(w, 4) : _mm256_and_si256(w, _mm256_set1_epi32(0x0f)));
    }
  }
  __m256i bytes() const {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    return _mm256_and_si256(High ? _mm256_srli_epi16(w, 4) : w, _mm256_set1_epi8(0x0f));
  }
};

// Q8_0: 32 signed bytes.
struct SignedPiece {
  const uint8_t* q;
  void floats(__m256* c) const {
    _Pragma("GCC unroll 4") for (int v = 0; v < 4; ++v) {
      c[v] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * v))));
    }
  }
  __m256i bytes() const { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)); }
};

// 32 codes already in a register as bytes: signed (Q5_0, Q6_K centred on their zero point)
// or unsigned below 128 (Q5_1, Q5_K), which widen alike.
struct RegisterPiece {
  __m256i v;
  void floats(__m256* c) const {
    const __m128i low = _mm256_castsi256_si128(v), high = _mm256_extracti128_si256(v, 1);
    c[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(low));
    c[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(low, 8)));
    c[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(high));
    c[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(high, 8)));
  }
  __m256i bytes() const { return v; }
};

// The fp16 d (and m after it) at the start of a 32-weight block.
inline void block_d_m(const uint8_t* block, float* d, float* m) {
  uint32_t word;
  std::memcpy(&word, block, 4);
  const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(word)));
  *d = _mm_cvtss_f32(both);
  *m = _mm_cvtss_f32(_mm_movehdup_ps(both));
}

// The fp16 pairs at the start of 8 blocks `Bytes` apart: d of each (low halves) and the
// half after it (high halves), as floats. Plain loads: the blocks are 18-34 bytes apart.
template <int Bytes>
inline void eight_d_m(const uint8_t* first, __m256* d, __m256* m) {
  uint32_t w[8];
  for (int j = 0; j < 8; ++j) std::memcpy(w + j, first + j * Bytes, 4);
  const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  // Per 128-bit lane, the low halves of its 4 words into bytes 0-7, the high ones into 8-15.
  const __m256i split = _mm256_shuffle_epi8(
      words, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3,
                              6, 7, 10, 11, 14, 15));
  const __m256i ordered = _mm256_permute4x64_epi64(split, 0xd8);  // lows of both lanes, then highs
  *d = _mm256_cvtph_ps(_mm256_castsi256_si128(ordered));
  *m = _mm256_cvtph_ps(_mm256_extracti128_si256(ordered, 1));
}

// Walks 32-weight blocks: 8 at a time, their scales converted together and their biases
// handed over as one vector (visit.bias8); a last few one by one (visit.bias).
template <class Format, class Visit>
[[gnu::always_inline]] inline void walk_blocks(const uint8_t* row, int64_t k, Visit& visit) {
  const int64_t blocks = k / 32;
  int64_t b0 = 0;
  for (; b0 + 8 <= blocks; b0 += 8) {
    const uint8_t* at = row + b0 * Format::kBytes;
    __m256 d, m;
    eight_d_m<Format::kBytes>(at, &d, &m);
    alignas(32) float scale[8];
    _mm256_store_ps(scale, d);
    // Read back from memory the scales are broadcast loads; left in a register, the
    // compiler spreads each with two shuffles, on the ports the code widening needs.
    asm volatile("" : : "r"(scale) : "memory");
    if (!Format::kSigned) visit.bias8(b0, Format::bias(d, m));
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j += 2) {
      visit.piece(Even{}, b0 + j, Format::piece(at + j * Format::kBytes), Scales{scale[j], scale[j], scale + j});
      visit.piece(Odd{}, b0 + j + 1, Format::piece(at + (j + 1) * Format::kBytes), Scales{scale[j + 1], scale[j + 1], scale + j + 1});
    }
  }
  for (int64_t b = b0; b < blocks; ++b) {
    const uint8_t* at = row + b * Format::kBytes;
    float d, m;
    block_d_m(at, &d, &m);
    if (!Format::kSigned) visit.bias(b, _mm256_cvtss_f32(Format::bias(_mm256_set1_ps(d), _mm256_set1_ps(m))));
    visit.piece(Lone{}, b, Format::piece(at), Scales{d, d, nullptr});
  }
}

template <int Bytes, bool HasM>
struct Q4Pieces {
  static constexpr int kBytes = Bytes;
  static constexpr bool kSplit = false;
  static constexpr bool kSigned = false;
  static NibblePiece piece(const uint8_t* block) { return NibblePiece{block + (HasM ? 4 : 2)}; }
  static __m256 bias(__m256 d, __m256 m) { return HasM ? m : _mm256_mul_ps(_mm256_set1_ps(-8.0f), d); }
  template <class Visit>
  static void walk(const uint8_t* row, int64_t k, Visit& visit) {
    walk_blocks<Q4Pieces>(row, k, visit);
  }
};

using Q4_0Pieces = Q4Pieces<18, false>;
using Q4_1Pieces = Q4Pieces<20, true>;

struct Q8_0Pieces {
  static constexpr int kBytes = 34;
  static constexpr bool kSplit = false;
  static constexpr bool kSigned = true;
  static SignedPiece piece(const uint8_t* block) { return SignedPiece{block + 2}; }
  static __m256 bias(__m256, __m256) { return _mm256_setzero_ps(); }
  template <class Visit>
  static void walk(const uint8_t* row, int64_t k, Visit& visit) {
    walk_blocks<Q8_0Pieces>(row, k, visit);
  }
};

// Q5_0's fifth bits (4 bytes, bit j for weight j) as bytes: 0x10 where set, else 0.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // byte j takes byte j / 8 of the word (the shuffle works per 128-bit lane; each holds the word)
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));  // bit j % 8
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Q5_0: 22 bytes, d, the fifth bits, then Q4_0's nibbles; codes centred on their zero
// point 16 as signed bytes (weight = d * (q - 16)), so no bias term, as Q8_0.
struct Q5_0Pieces {
  static constexpr int kBytes = 22;
  static constexpr bool kSplit = false;
  static constexpr bool kSigned = true;
  static RegisterPiece piece(const uint8_t* block) {
    const __m256i q = _mm256_or_si256(NibblePiece{block + 6}.bytes(), fifth_bits(block + 2));
    return RegisterPiece{_mm256_sub_epi8(q, _mm256_set1_epi8(16))};
  }
  static __m256 bias(__m256, __m256) { return _mm256_setzero_ps(); }
  template <class Visit>
  static void walk(const uint8_t* row, int64_t k, Visit& visit) {
    walk_blocks<Q5_0Pieces>(row, k, visit);
  }
};

// Q5_1: 24 bytes, d, m, the fifth bits, then Q4_1's nibbles (weight = d * q + m).
struct Q5_1Pieces {
  static constexpr int kBytes = 24;
  static constexpr bool kSplit = false;
  static constexpr bool kSigned = false;
  static RegisterPiece piece(const uint8_t* block) {
    return RegisterPiece{_mm256_or_si256(NibblePiece{block + 8}.bytes(), fifth_bits(block + 4))};
  }
  static __m256 bias(__m256, __m256 m) { return m; }
  template <class Visit>
  static void walk(const uint8_t* row, int64_t k, Visit& visit) {
    walk_blocks<Q5_1Pieces>(row, k, visit);
  }
};

// A Q4_K / Q5_K super-block's 8 sub-block scales d * sc into `scale` and their biases
// -(dmin * m) handed over as one vector (k_scale_min's values).
template <class Visit>
[[gnu::always_inline]] inline void k_super_scales(const uint8_t* at, int64_t s, Visit& visit, float* scale) {
  uint64_t sc, mn;
  k_scales_and_mins(at + 4, &sc, &mn);
  const __m256 scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(sc))));
  const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn))));
  _mm256_store_ps(scale, _mm256_mul_ps(scales, _mm256_set1_ps(half_at(at))));
  visit.bias8(8 * s, _mm256_mul_ps(mins, _mm256_set1_ps(-half_at(at + 2))));
}

// Q4_K: per super-block the 8 sub-blocks' scales d * sc and biases -(dmin * m)
// (k_scale_min's values), then chunk i's 32 bytes as sub-blocks 2i (low nibbles) and 2i + 1.
struct Q4_KPieces {
  static constexpr bool kSplit = false;
  static constexpr bool kSigned = false;
  template <class Visit>
  static void walk(const uint8_t* row, int64_t k, Visit& visit) {
    for (int64_t s = 0; s < k / 256; ++s) {
      const uint8_t* at = row + s * 144;
      alignas(32) float scale[8];
      k_super_scales(at, s, visit, scale);
      asm volatile("" : : "r"(scale) : "memory");  // broadcast loads, not shuffles (walk_blocks)
      _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) {
        const uint8_t* q = at + 16 + 32 * i;
        const Scales low{scale[2 * i], scale[2 * i], scale + 2 * i}, high{scale[2 * i + 1], scale[2 * i + 1], scale + 2 * i + 1};
        visit.piece(Even{}, 8 * s + 2 * i, HalfBytePiece<false>{q}, low);
        visit.piece(Odd{}, 8 * s + 2 * i + 1, HalfBytePiece<true>{q}, high);
      }
    }
  }
};

// Q5_K: Q4_K's scales and nibbles (after 32 bytes of fifth bits); sub-block j's fifth bits
// are bit j of those 32 bytes, one byte a weight, moved to bit 4 as the walk goes.
struct Q5_KPieces {
  static constexpr bool kSplit = false;
  static constexpr bool kSigned = false;
  static __m256i load(const uint8_t* at) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)); }
  template <class Visit>
  static void walk(const uint8_t* row, int64_t k, Visit& visit) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), fifth = _mm256_set1_epi8(0x10);
    for (int64_t s = 0; s < k / 256; ++s) {
      const uint8_t* at = row + s * 176;
      alignas(32) float scale[8];
      k_super_scales(at, s, visit, scale);
      asm volatile("" : : "r"(scale) : "memory");  // broadcast loads, not shuffles (walk_blocks)
      __m256i h = load(at + 16);  // bits 2i and 2i + 1 of each byte: chunk i's two sub-blocks
      _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) {
        const __m256i q = load(at + 48 + 32 * i);
        // 16-bit shifts: bit 4 of each byte still comes from that byte (shifts of at most 4)
        const __m256i low = _mm256_or_si256(_mm256_and_si256(q, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), fifth));
        const __m256i high = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4),
                                             _mm256_and_si256(_mm256_slli_epi16(h, 3), fifth));
        h = _mm256_srli_epi16(h, 2);
        const Scales lo{scale[2 * i], scale[2 * i], scale + 2 * i}, hi{scale[2 * i + 1], scale[2 * i + 1], scale + 2 * i + 1};
        visit.piece(Even{}, 8 * s + 2 * i, RegisterPiece{low}, lo);
        visit.piece(Odd{}, 8 * s + 2 * i + 1, RegisterPiece{high}, hi);
      }
    }
  }
};

// Q6_K: per half of a super-block (128 weights), 64 bytes of low nibbles and 32 of 2-bit
// high parts make four pieces (decode_q6_k's order), centred on their zero point 32 as
// bytes; a scale per 16 weights, d * sc.
struct Q6_KPieces {
  static constexpr bool kSplit = true;
  static constexpr bool kSigned = true;
  static __m256i load(const uint8_t* at) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)); }
  template <class Visit>
  static void walk(const uint8_t* row, int64_t k, Visit& visit) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), high2 = _mm256_set1_epi8(0x30), zero = _mm256_set1_epi8(32);
    for (int64_t s = 0; s < k / 256; ++s) {
      const uint8_t* at = row + s * 210;
      const __m256 d = _mm256_set1_ps(half_at(at + 208));
      alignas(32) float scale[16];
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 192));
      _mm256_store_ps(scale, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), d));
      _mm256_store_ps(scale + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), d));
      asm volatile("" : : "r"(scale) : "memory");  // broadcast loads, not shuffles (walk_blocks)
      _Pragma("GCC unroll 2") for (int half = 0; half < 2; ++half) {
        const __m256i l0 = load(at + 64 * half), l1 = load(at + 64 * half + 32), h = load(at + 128 + 32 * half);
        const __m256i v0 = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), high2));
        const __m256i v1 = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), high2));
        const __m256i v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, high2));
        const __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                           _mm256_and_si256(_mm256_srli_epi16(h, 2), high2));
        const float* g = scale + 8 * half;
        const int64_t b = 8 * s + 4 * half;
        visit.piece(Even{}, b, RegisterPiece{_mm256_sub_epi8(v0, zero)}, Scales{g[0], g[1], g});
        visit.piece(Odd{}, b + 1, RegisterPiece{_mm256_sub_epi8(v1, zero)}, Scales{g[2], g[3], g + 2});
        visit.piece(Even{}, b + 2, RegisterPiece{_mm256_sub_epi8(v2, zero)}, Scales{g[4], g[5], g + 4});
        visit.piece(Odd{}, b + 3, RegisterPiece{_mm256_sub_epi8(v3, zero)}, Scales{g[6], g[7], g + 6});
      }
    }
  }
};

// The bias terms of R activation rows, as the walks hand them over (visit.bias8 and
// visit.bias): bias * the activations' sum over the piece, read from one float a piece (the
// fp32 engine's sum of x, the int8 engine's da * sum of qa). The engines' tiles derive from it.
template <int R>
struct PieceBiases {
  const float* sums[R];
  __m256 bias_acc[R];
  float bias_tail[R];

  // Rows m0..m0+R-1 of `rows` (one sum a piece, `pieces` a row; none for signed formats).
  void start_biases(const float* rows, int64_t m0, int64_t pieces) {
    for (int r = 0; r < R; ++r) {
      sums[r] = rows == nullptr ? nullptr : rows + (m0 + r) * pieces;
      bias_acc[r] = _mm256_setzero_ps();
      bias_tail[r] = 0.0f;
    }
  }
  [[gnu::always_inline]] void bias8(int64_t b0, __m256 m) {
    _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
      bias_acc[r] = _mm256_fmadd_ps(m, _mm256_loadu_ps(sums[r] + b0), bias_acc[r]);
    }
  }
  [[gnu::always_inline]] void bias(int64_t b, float m) {
    for (int r = 0; r < R; ++r) bias_tail[r] += m * sums[r][b];
  }
  // Row r's result: its products' lanes `dots` with its biases added.
  float with_biases(int r, __m256 dots) const { return reduce256(_mm256_add_ps(dots, bias_acc[r])) + bias_tail[r]; }
};

// Runs Tile<R>::run(p, x, n, m0) over weight rows n0..n1 and every activation row, in
// tiles of at most four rows; each tile walks the row again, so every row's operations are
// those of a tile of one.
template <template <int> class Tile>
inline void avx2_direct_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    int64_t m = 0;
    for (; m + 4 <= p.m; m += 4) Tile<4>::run(p, x, n, m);
    switch (p.m - m) {
      case 3: Tile<3>::run(p, x, n, m); break;
      case 2: Tile<2>::run(p, x, n, m); break;
      case 1: Tile<1>::run(p, x, n, m); break;
      default: break;
    }
  }
}

}  // namespace
}  // namespace clika_kernels

// The AVX-512 fp32 engine's in-register walks at a few activation rows (up to 4).
// Included by avx512_fp32.cpp after its target options, so it compiles for that ISA.
#pragma once

#include "avx512_rows.h"

namespace clika_kernels {
namespace {

template <int J>
inline __m512 group_weights(__m512i codes, const float* scale4, const float* bias4) {
  const __m512 c = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(codes, J)));
  return _mm512_fmadd_ps(c, _mm512_set1_ps(scale4[J]), _mm512_set1_ps(bias4[J]));
}

template <int R>
struct Fp32Rows {
  const float* a[R];
  __m512 acc[R][2];

  Fp32Rows(const Problem& p, const Activations& x, int64_t m0) {
    for (int r = 0; r < R; ++r) {
      a[r] = x.a + (m0 + r) * p.k;
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    }
  }

  void unit(int64_t, int, const float*, const float*) {}

  template <int J>
  void group(__m512i codes, int64_t k, const float* scale4, const float* bias4) {
    const __m512 w = group_weights<J>(codes, scale4, bias4);
    for (int r = 0; r < R; ++r) acc[r][J & 1] = _mm512_fmadd_ps(w, _mm512_loadu_ps(a[r] + k + 16 * J), acc[r][J & 1]);
  }

  void chunk(__m512i codes, const uint8_t*, int64_t k, int c, bool half, const float* scale16, const float* bias16) {
    const float* scale4 = scale16 + 4 * c;
    const float* bias4 = bias16 + 4 * c;
    group<0>(codes, k, scale4, bias4);
    group<1>(codes, k, scale4, bias4);
    if (half) return;
    group<2>(codes, k, scale4, bias4);
    group<3>(codes, k, scale4, bias4);
  }

  void finish(float* out) {
    for (int r = 0; r < R; ++r) out[r] = reduce_pair(acc[r][0], acc[r][1]);
  }
};

// Q4_0 / Q4_1 at a few activation rows, block by block: both 16-groups of a 32-weight block
// have the block's scale and bias, so one table per block is the table the chunk walk would
// build for each group, and one widen serves both nibbles. Each block's weights meet the same
// accumulators in the chunk walk's order (low nibbles into acc 0, high into acc
// 1, block after block), so the result is that walk's, bit for bit, and the panel's.
// The walk's per-chunk bookkeeping and its scales put through registers with shuffles cost
// more than the arithmetic; here the fp16 scales of a piece of blocks are first picked out
// and converted 16 at a time (BlockScales), and each block reads its own with broadcast
// loads, which on AVX-512 cores take no shuffle port.
constexpr int kScalePiece = 64;  // blocks

template <class Format>
struct BlockScales {
  alignas(64) float d[kScalePiece];
  alignas(64) float m[kScalePiece];

  // The fp16 scales (and Q4_1's minimums) of 16 blocks are picked out of five plain loads
  // of their bytes with three permutes. With a masked gather of them instead, SmolLM2-135M's
  // decode step was 8-12% slower (7.3-8.0 against 6.5-7.5 ms fastest, decode_profile.py,
  // alternating builds); staging them with scalar stores made every row wait on a failed
  // store-to-load forward.
  void load(const uint8_t* blocks, int count) {
    static_assert(Format::kBytes == 20 || (Format::kBytes == 18 && !Format::kHasM), "Q4_1 or Q4_0 blocks");
    if constexpr (Format::kBytes == 20) {
      load20(blocks, count);
    } else {
      load18(blocks, count);
    }
  }

  // The 320 bytes from `at` as five vectors, only the first `live` read (the rest zero), so
  // the last blocks of a matrix never read past it.
  static void load_run(const uint8_t* at, int live, __m512i* v) {
    for (int i = 0; i < 5; ++i) {
      const int left = live - 64 * i;
      const __mmask64 mask = left >= 64 ? ~0ull : left <= 0 ? 0 : (1ull << left) - 1;
      v[i] = _mm512_maskz_loadu_epi8(mask, at + 64 * i);
    }
  }

  // 20-byte blocks (Q4_1): the heads (d, m) of 16 blocks are dwords 0, 5, ..., 75 of their
  // 320 bytes.
  void load20(const uint8_t* blocks, int count) {
    const __m512i idx_a = _mm512_setr_epi32(0, 5, 10, 15, 20, 25, 30, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx_b = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 3, 8, 13, 18, 23, 28, 0, 0, 0);
    const __m512i idx_c = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 6, 11);
    for (int b = 0; b < count; b += 16) {
      __m512i v[5];
      load_run(blocks + b * 20, std::min(16, count - b) * 20, v);
      __m512i words = _mm512_permutex2var_epi32(v[0], idx_a, v[1]);
      words = _mm512_mask_blend_epi32(0x1f80, words, _mm512_permutex2var_epi32(v[2], idx_b, v[3]));
      words = _mm512_mask_blend_epi32(0xe000, words, _mm512_permutexvar_epi32(idx_c, v[4]));
      const __m512 scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
      const __m512 bias = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
      _mm512_store_ps(d + b, scale);
      _mm512_store_ps(m + b, bias);
    }
  }

  // 18-byte blocks (Q4_0): the fp16 scales of 16 blocks are words 0, 9, ..., 135 of their
  // 288 bytes (index pairs packed low word first).
  void load18(const uint8_t* blocks, int count) {
    const __m512i idx_a = _mm512_setr_epi32(0x90000, 0x1b0012, 0x2d0024, 0x3f0036, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx_b = _mm512_setr_epi32(0, 0, 0, 0, 0x110008, 0x23001a, 0x35002c, 0x3e, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i idx_c = _mm512_setr_epi32(0, 0, 0, 0x70000, 0, 0, 0, 0x70000, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int b = 0; b < count; b += 16) {
      __m512i v[5];
      load_run(blocks + b * 18, std::min(16, count - b) * 18, v);
      __m512i words = _mm512_permutex2var_epi16(v[0], idx_a, v[1]);
      words = _mm512_mask_blend_epi16(0x7f00, words, _mm512_permutex2var_epi16(v[2], idx_b, v[3]));
      words = _mm512_mask_blend_epi16(0x8000, words, _mm512_permutexvar_epi16(idx_c, v[4]));
      const __m512 scale = _mm512_cvtph_ps(_mm512_castsi512_si256(words));
      _mm512_store_ps(d + b, scale);
      _mm512_store_ps(m + b, _mm512_mul_ps(_mm512_set1_ps(-Format::kZero), scale));
    }
  }
};

template <class Format, int R>
struct BlockRows {
  const float* a[R];
  __m512 acc[R][2];

  BlockRows(const Problem& p, const Activations& x, int64_t m0) {
    for (int r = 0; r < R; ++r) {
      a[r] = x.a + (m0 + r) * p.k;
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    }
  }

  // Blocks b0..b0+count-1 of the row starting at `row`.
  [[gnu::always_inline]] void piece(const uint8_t* row, int64_t b0, int count, const BlockScales<Format>& s) {
    const __m512 codes16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int b = 0; b < count; ++b) {
      const __m512 table = _mm512_fmadd_ps(codes16, _mm512_set1_ps(s.d[b]), _mm512_set1_ps(s.m[b]));
      const uint8_t* run = Format::run(row + (b0 + b) * Format::kBytes, 0, 0);
      const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(run)));
      const __m512 low = _mm512_permutexvar_ps(q, table);
      const __m512 high = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
      const int64_t k = 32 * (b0 + b);
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        acc[r][0] = _mm512_fmadd_ps(low, _mm512_loadu_ps(a[r] + k), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(high, _mm512_loadu_ps(a[r] + k + 16), acc[r][1]);
      }
    }
  }

  static void run(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
    BlockRows rows(p, x, m0);
    const uint8_t* row = p.b + n * p.row_bytes;
    const int64_t blocks = p.k / 32;
    BlockScales<Format> scales;
    for (int64_t b0 = 0; b0 < blocks; b0 += kScalePiece) {
      const int count = static_cast<int>(std::min<int64_t>(kScalePiece, blocks - b0));
      scales.load(row + b0 * Format::kBytes, count);
      rows.piece(row, b0, count, scales);
    }
    for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n] = reduce_pair(rows.acc[r][0], rows.acc[r][1]);
  }
};

template <class Format>
struct Blocks {
  template <int R>
  using Rows = BlockRows<Format, R>;
};

// Q4_K at a few activation rows, super-block by super-block: the 16-groups of a 32-weight
// sub-block share its scale and min, so a chunk of 64 needs two tables, not four; each
// 16-byte run is widened once for its low nibbles (groups 0 and 1 of the chunk) and its
// high ones (groups 2 and 3). The groups meet the accumulators in the panel's order
// (Steps: 0, 2, 1, 3, alternating accumulators), so both give the same result, bit for bit.
template <int R>
struct SuperRows {
  const float* a[R];
  __m512 acc[R][2];

  SuperRows(const Problem& p, const Activations& x, int64_t m0) {
    for (int r = 0; r < R; ++r) {
      a[r] = x.a + (m0 + r) * p.k;
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    }
  }

  [[gnu::always_inline]] void super_block(const uint8_t* u, int64_t k0) {
    alignas(64) float scale16[kMaxUnitGroups];
    alignas(64) float bias16[kMaxUnitGroups];
    Q4_KBlocks::scales(u, 1, scale16, bias16);
    // Left alone, the compiler keeps the scales in registers and spreads them with
    // shuffles, on the port the lookups need; read back from memory they are broadcast
    // loads, which use no shuffle port.
    asm volatile("" : : "r"(scale16), "r"(bias16) : "memory");
    const __m512 codes16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; ++c) {
      const __m512 low_table = _mm512_fmadd_ps(codes16, _mm512_set1_ps(scale16[4 * c]), _mm512_set1_ps(bias16[4 * c]));
      const __m512 high_table =
          _mm512_fmadd_ps(codes16, _mm512_set1_ps(scale16[4 * c + 2]), _mm512_set1_ps(bias16[4 * c + 2]));
      _Pragma("GCC unroll 2") for (int i = 0; i < 2; ++i) {
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Q4_KBlocks::run(u, c, i))));
        const __m512 low = _mm512_permutexvar_ps(q, low_table);
        const __m512 high = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), high_table);
        const int64_t k = k0 + 64 * c + 16 * i;
        _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
          acc[r][0] = _mm512_fmadd_ps(low, _mm512_loadu_ps(a[r] + k), acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(high, _mm512_loadu_ps(a[r] + k + 32), acc[r][1]);
        }
      }
    }
  }

  static void run(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
    SuperRows rows(p, x, m0);
    const uint8_t* row = p.b + n * p.row_bytes;
    for (int64_t k0 = 0; k0 < p.k; k0 += 256) rows.super_block(row + k0 / 256 * Q4_KBlocks::kBytes, k0);
    for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n] = reduce_pair(rows.acc[r][0], rows.acc[r][1]);
  }
};

}  // namespace
}  // namespace clika_kernels

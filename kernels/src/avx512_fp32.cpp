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

// Prefill (more activation rows than a tile): the task's weight rows decoded once into
// fp32 scratch, each weight the same fma(code, scale, bias) the in-register walk forms,
// then read back by 2 weight rows x 4 activation rows at a time, K in pieces of kPiece
// weights so a tile's activations stay in L1. Each (m, n) goes through its 16-groups in
// the walk's order into the walk's two accumulators (kSteps: the group of each step of a
// chunk, step I into accumulator I & 1), so the result is the in-register one, bit for bit.
template <class Format>
struct Steps {
  static constexpr int kGroups[4] = {0, 1, 2, 3};
};
template <>
struct Steps<Q4_KBlocks> {
  static constexpr int kGroups[4] = {0, 2, 1, 3};
};

constexpr int64_t kPiece = 1024;

// walk_row's Rows that writes each chunk's weights (group_weights, as Fp32Rows forms them).
struct PanelWriter {
  float* out;
  void unit(int64_t, int, const float*, const float*) {}
  void chunk(__m512i codes, const uint8_t*, int64_t k, int c, bool half, const float* scale16, const float* bias16) {
    const float* scale4 = scale16 + 4 * c;
    const float* bias4 = bias16 + 4 * c;
    _mm512_storeu_ps(out + k, group_weights<0>(codes, scale4, bias4));
    _mm512_storeu_ps(out + k + 16, group_weights<1>(codes, scale4, bias4));
    if (half) return;
    _mm512_storeu_ps(out + k + 32, group_weights<2>(codes, scale4, bias4));
    _mm512_storeu_ps(out + k + 48, group_weights<3>(codes, scale4, bias4));
  }
};

template <class Format>
void decode_weights(const uint8_t* row, int64_t k, float* out) {
  PanelWriter writer{out};
  walk_row<Format>(row, k, writer);
}

// NW weight rows (n, n + 1) x R activation rows (m0..): accumulators over k0..k1.
template <class Format, int NW, int R>
struct PanelTile {
  __m512 acc[NW][R][2];

  [[gnu::always_inline]] void load(const __m512* state) {
    _Pragma("GCC unroll 2") for (int w = 0; w < NW; ++w) {
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        acc[w][r][0] = state[w * 8 + 2 * r];
        acc[w][r][1] = state[w * 8 + 2 * r + 1];
      }
    }
  }
  [[gnu::always_inline]] void save(__m512* state) const {
    _Pragma("GCC unroll 2") for (int w = 0; w < NW; ++w) {
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        state[w * 8 + 2 * r] = acc[w][r][0];
        state[w * 8 + 2 * r + 1] = acc[w][r][1];
      }
    }
  }

  [[gnu::always_inline]] void step(const float* const* wrow, const float* const* arow, int64_t k, int i) {
    __m512 wv[NW];
    _Pragma("GCC unroll 2") for (int w = 0; w < NW; ++w) wv[w] = _mm512_loadu_ps(wrow[w] + k);
    _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_loadu_ps(arow[r] + k);
      _Pragma("GCC unroll 2") for (int w = 0; w < NW; ++w) acc[w][r][i] = _mm512_fmadd_ps(wv[w], a, acc[w][r][i]);
    }
  }

  static void run(const Problem& p, const Activations& x, const float* panel, int64_t n0, int64_t n, int64_t m0,
                  int64_t k0, int64_t k1, __m512* state) {
    PanelTile t;
    if (k0 == 0) {
      _Pragma("GCC unroll 2") for (int w = 0; w < NW; ++w) {
        _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) t.acc[w][r][0] = t.acc[w][r][1] = _mm512_setzero_ps();
      }
    } else {
      t.load(state);
    }
    const float* wrow[NW];
    const float* arow[R];
    for (int w = 0; w < NW; ++w) wrow[w] = panel + (n - n0 + w) * p.k;
    for (int r = 0; r < R; ++r) arow[r] = x.a + (m0 + r) * p.k;
    for (int64_t c = k0; c < k1; c += 64) {
      t.step(wrow, arow, c + 16 * Steps<Format>::kGroups[0], 0);
      t.step(wrow, arow, c + 16 * Steps<Format>::kGroups[1], 1);
      if (p.k - c < 64) break;
      t.step(wrow, arow, c + 16 * Steps<Format>::kGroups[2], 0);
      t.step(wrow, arow, c + 16 * Steps<Format>::kGroups[3], 1);
    }
    if (k1 < p.k) {
      t.save(state);
      return;
    }
    if constexpr (NW == 2 && R == 4) {
      t.store_reduced(p, n, m0);
      return;
    }
    for (int w = 0; w < NW; ++w) {
      for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n + w] = reduce_pair(t.acc[w][r][0], t.acc[w][r][1]);
    }
  }

  // The tile's 8 outputs reduced together: the same additions as reduce_pair (GCC's
  // _mm512_reduce_add_ps tree: halves of 256, of 128, lanes (0, 2) and (1, 3), then the
  // pair) on 8 vectors at once, so the same bits. One by one, the reductions cost a
  // 64-row prefill of Q4_1 576x3072 10% of its time (5.17 against 4.67 ms, one thread).
  [[gnu::always_inline]] void store_reduced(const Problem& p, int64_t n, int64_t m0) const {
    __m512 v[8];
    for (int w = 0; w < 2; ++w) {
      for (int r = 0; r < 4; ++r) v[4 * w + r] = _mm512_add_ps(acc[w][r][0], acc[w][r][1]);
    }
    __m512 s[4];
    for (int i = 0; i < 4; ++i) {
      const __m512 lo = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44);
      const __m512 hi = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee);
      s[i] = _mm512_add_ps(hi, lo);
    }
    __m512 u[2];
    for (int i = 0; i < 2; ++i) {
      const __m512 lo = _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88);
      const __m512 hi = _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xdd);
      u[i] = _mm512_add_ps(hi, lo);
    }
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x44), _mm512_shuffle_ps(u[0], u[1], 0xee));
    const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(z, z, 0x88), _mm512_shuffle_ps(z, z, 0xdd));
    alignas(64) float out[16];
    _mm512_store_ps(out, f);
    // Lane 4k holds v[k]'s sum (weight row n, activation row k), lane 4k + 1 v[4 + k]'s (n + 1).
    for (int k = 0; k < 4; ++k) {
      p.y[(m0 + k) * p.n + n] = out[4 * k];
      p.y[(m0 + k) * p.n + n + 1] = out[4 * k + 1];
    }
  }
};

template <class Format, int NW>
void panel_rows(int rows, const Problem& p, const Activations& x, const float* panel, int64_t n0, int64_t n,
                int64_t m0, int64_t k0, int64_t k1, __m512* state) {
  switch (rows) {
    case 4: PanelTile<Format, NW, 4>::run(p, x, panel, n0, n, m0, k0, k1, state); break;
    case 3: PanelTile<Format, NW, 3>::run(p, x, panel, n0, n, m0, k0, k1, state); break;
    case 2: PanelTile<Format, NW, 2>::run(p, x, panel, n0, n, m0, k0, k1, state); break;
    default: PanelTile<Format, NW, 1>::run(p, x, panel, n0, n, m0, k0, k1, state); break;
  }
}

template <class Format>
void panel_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) decode_weights<Format>(p.b + n * p.row_bytes, p.k, s.panel + (n - n0) * p.k);
  __m512* states = reinterpret_cast<__m512*>(s.tile_states);
  for (int64_t m0 = 0; m0 < p.m; m0 += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, p.m - m0));
    for (int64_t k0 = 0; k0 < p.k; k0 += kPiece) {
      const int64_t k1 = std::min(p.k, k0 + kPiece);
      int64_t n = n0;
      for (; n + 2 <= n1; n += 2) panel_rows<Format, 2>(rows, p, x, s.panel, n0, n, m0, k0, k1, states + (n - n0) * 8);
      if (n < n1) panel_rows<Format, 1>(rows, p, x, s.panel, n0, n, m0, k0, k1, states + (n - n0) * 8);
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

// The 4-bit formats walk their blocks directly at a few rows (BlockRows, SuperRows).
template <class Format, template <int> class Rows>
void direct_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (p.m > 4) {
    panel_range<Format>(p, x, s, n0, n1);
  } else {
    few_rows_range<Rows>(p, x, n0, n1);
  }
}

}  // namespace

void avx512_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  switch (p.type) {
    case kQ4_0: direct_fp32_range<Q4_0Blocks, Blocks<Q4_0Blocks>::Rows>(p, x, s, n0, n1); break;
    case kQ4_1: direct_fp32_range<Q4_1Blocks, Blocks<Q4_1Blocks>::Rows>(p, x, s, n0, n1); break;
    case kQ4_K: direct_fp32_range<Q4_KBlocks, SuperRows>(p, x, s, n0, n1); break;
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

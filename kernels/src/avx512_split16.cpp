// AVX-512 VNNI fp32-grade engine for Q4_0 and Q4_1 nodes whose fp32_form is "split16":
// the activations as 16-bit integers per 32 weights, each split into two int8 halves (q = 256 hi + lo), so one exact integer
// dot per block takes 16 vpdpbusd for 16 outputs, against 32 fp32 FMAs.
//
// Per block b of 32 weights, activation row r and output n, the one arithmetic every M runs:
//   t     = sum_k (code[n, k] - 8) * q[r, k]             (int32, exact; |t| < 2^23)
//   y     = fma(d[n, b] * dx[r, b], float(t), y)
//   Q4_1: y = fma(m[n, b] + 8 d[n, b], xsum[r, b], y)     (xsum: the block's fp32 sum of x)
// from y = 0, blocks in order. Lanes are 16 outputs side by side, so the decoded weights of
// 16 rows serve every activation row; a row's result does not depend on the rows beside it.
// The error is the activations' rounding to 16 bits of their block's largest magnitude
// (kernels/README.md); Q4_1's codes are centred as Q4_0's, which halved its error (the
// rounding then meets weights around zero, not around the block's minimum).
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

#include <cfloat>
#include <cmath>
#include <type_traits>
#include <vector>

#include "activations.h"
#include "formats.h"
#include "kernel_api.h"
#include "row_tiles.h"

namespace clika_kernels {
namespace {

constexpr int kCols = 16;          // outputs per tile, one per lane
constexpr int kTileRows = 8;       // activation rows sharing a block's decoded weights
constexpr int64_t kChunkRows = 64; // rows whose records stay in L2 while a tile's panel is replayed
constexpr int kQuantMax = 32639;   // 127 * 256 + 127: both halves stay int8
constexpr int64_t kCodeBytes = 64; // per row and block: 32 high halves, then 32 low halves
constexpr int64_t kMetaBytes = 16; // per row and block: dx, start (int32 bits), xsum, 0

struct Q4Format {
  int64_t block_bytes;
  int64_t code_offset;  // the codes follow d (and Q4_1's m), one fp16 each
  bool has_min;
};

Q4Format q4_format(int type) {
  BlockLayout layout;
  block_layout(type, &layout);
  const bool has_min = type == kQ4_1;
  return Q4Format{layout.bytes, has_min ? 4 : 2, has_min};
}

// One block of 16 weight rows, decoded: w[c] lane i holds row i's codes 4c..4c+3 (c < 4:
// low nibbles, weights 4c..; c >= 4: high nibbles, weights 16 + 4(c - 4)..) as bytes.
struct DecodedBlock {
  __m512i w[8];
  __m512 d, m;
};

struct TileRows {
  const uint8_t* first;  // row 0 of the tile
  int64_t offsets[kCols];
  __m512i gather_offsets;
};

TileRows tile_rows(const Problem& p, int64_t n, int cols) {
  TileRows t;
  t.first = p.b + n * p.row_bytes;
  alignas(64) int32_t offsets[kCols];
  for (int i = 0; i < kCols; ++i) {
    t.offsets[i] = (i < cols ? i : cols - 1) * p.row_bytes;  // a short tile repeats its last row
    offsets[i] = static_cast<int32_t>(t.offsets[i]);
  }
  t.gather_offsets = _mm512_load_si512(offsets);
  return t;
}

inline __m512i four_rows(const uint8_t* at, const int64_t* offsets) {
  __m512i z = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + offsets[0])));
  z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + offsets[1])), 1);
  z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + offsets[2])), 2);
  return _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + offsets[3])), 3);
}

// The 16 code bytes of 16 rows transposed by dwords: out lane i = dword c of row i.
inline void decode_block(const TileRows& t, int64_t block, const Q4Format& f, DecodedBlock* out) {
  const uint8_t* at = t.first + block * f.block_bytes;
  const __m512i z0 = four_rows(at + f.code_offset, t.offsets);
  const __m512i z1 = four_rows(at + f.code_offset, t.offsets + 4);
  const __m512i z2 = four_rows(at + f.code_offset, t.offsets + 8);
  const __m512i z3 = four_rows(at + f.code_offset, t.offsets + 12);
  // Lane l of the first pick: dword l / 8 of row l % 8 (rows 0-3 in a, 4-7 in b).
  const __m512i pick01 = _mm512_set_epi32(29, 25, 21, 17, 13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
  const __m512i pick23 = _mm512_set_epi32(31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2);
  const __m512i a01 = _mm512_permutex2var_epi32(z0, pick01, z1);
  const __m512i b01 = _mm512_permutex2var_epi32(z0, pick23, z1);
  const __m512i a23 = _mm512_permutex2var_epi32(z2, pick01, z3);
  const __m512i b23 = _mm512_permutex2var_epi32(z2, pick23, z3);
  const __m512i v[4] = {_mm512_shuffle_i64x2(a01, a23, 0x44), _mm512_shuffle_i64x2(a01, a23, 0xEE),
                        _mm512_shuffle_i64x2(b01, b23, 0x44), _mm512_shuffle_i64x2(b01, b23, 0xEE)};
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    out->w[c] = _mm512_and_si512(v[c], nibble);
    out->w[4 + c] = _mm512_and_si512(_mm512_srli_epi16(v[c], 4), nibble);
  }
  // d (and Q4_1's m) lead the block: one dword per row.
  const __m512i head = _mm512_i32gather_epi32(t.gather_offsets, at, 1);
  out->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
  if (f.has_min) {  // the bias of the centred codes: m + 8 d
    const __m512 m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
    out->m = _mm512_add_ps(m, _mm512_mul_ps(_mm512_set1_ps(8.0f), out->d));
  }
}

struct RowRecords {
  const uint8_t* codes;  // the row's first block: kCodeBytes per block
  const float* meta;     // 4 floats per block
};

inline __m512i broadcast_dword(const uint8_t* at) {
  int32_t v;
  __builtin_memcpy(&v, at, 4);
  return _mm512_set1_epi32(v);
}

// R rows' products with one decoded block, added to their outputs y. A row's 16 products
// are chains of vpdpbusd; few rows split each into independent chains (their sum is the
// same exact integer), so one row is not bound by the instruction's latency: SmolLM2's
// 1536 x 576 at one row took 17.6 against 24.2 us in cache.
template <int R>
constexpr int chains_per_row() {
  return R <= 2 ? 4 : (R <= 4 ? 2 : 1);
}

template <int C>
inline __m512i chain_sum(const __m512i* acc) {
  if (C == 1) return acc[0];
  if (C == 2) return _mm512_add_epi32(acc[0], acc[1]);
  return _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
}

// The products' scale and bias, added to y (the same steps for every R).
template <bool kHasMin>
inline __m512 add_block(const DecodedBlock& w, const float* meta, __m512i t, __m512 y) {
  const __m512 scale = _mm512_mul_ps(w.d, _mm512_set1_ps(meta[0]));
  y = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(t), y);
  return kHasMin ? _mm512_fmadd_ps(w.m, _mm512_set1_ps(meta[2]), y) : y;
}

inline __m512i start_of(const float* meta) { return broadcast_dword(reinterpret_cast<const uint8_t*>(meta + 1)); }

// Many rows: one accumulator a row (registers are short), the high halves' sum shifted in
// place before the low halves join it.
template <int R, bool kHasMin>
inline void block_rows_one_chain(const DecodedBlock& w, const RowRecords* rows, int64_t block, __m512* y) {
  __m512i acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
  for (int c = 0; c < 8; ++c) {
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_dpbusd_epi32(acc[r], w.w[c], broadcast_dword(rows[r].codes + block * kCodeBytes + 4 * c));
    }
  }
  for (int r = 0; r < R; ++r) acc[r] = _mm512_add_epi32(_mm512_slli_epi32(acc[r], 8), start_of(rows[r].meta + 4 * block));
  for (int c = 0; c < 8; ++c) {
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_dpbusd_epi32(acc[r], w.w[c], broadcast_dword(rows[r].codes + block * kCodeBytes + 32 + 4 * c));
    }
  }
  for (int r = 0; r < R; ++r) y[r] = add_block<kHasMin>(w, rows[r].meta + 4 * block, acc[r], y[r]);
}

template <int R, bool kHasMin>
inline void block_rows(const DecodedBlock& w, const RowRecords* rows, int64_t block, __m512* y) {
  constexpr int C = chains_per_row<R>();
  if (C == 1) return block_rows_one_chain<R, kHasMin>(w, rows, block, y);
  __m512i hi[R][C], lo[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) hi[r][j] = lo[r][j] = _mm512_setzero_si512();
  }
  for (int c = 0; c < 8; ++c) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* codes = rows[r].codes + block * kCodeBytes + 4 * c;
      hi[r][c % C] = _mm512_dpbusd_epi32(hi[r][c % C], w.w[c], broadcast_dword(codes));
      lo[r][c % C] = _mm512_dpbusd_epi32(lo[r][c % C], w.w[c], broadcast_dword(codes + 32));
    }
  }
  for (int r = 0; r < R; ++r) {
    const float* meta = rows[r].meta + 4 * block;
    __m512i t = _mm512_add_epi32(_mm512_slli_epi32(chain_sum<C>(hi[r]), 8), start_of(meta));
    y[r] = add_block<kHasMin>(w, meta, _mm512_add_epi32(t, chain_sum<C>(lo[r])), y[r]);
  }
}

// The next tile's 16 rows are one contiguous run of bytes; a tile walks its rows a block at
// a time, 16 strided streams the hardware prefetchers follow poorly. So each block step asks
// for its share of the next tile's lines, in order.
struct NextTile {
  const uint8_t* first = nullptr;
  int64_t lines = 0, per_block = 0;
};

inline NextTile next_tile(const Problem& p, int64_t n, int64_t n1, int64_t blocks) {
  NextTile t;
  if (n >= n1) return t;
  const int64_t rows = n1 - n < kCols ? n1 - n : kCols;
  t.first = p.b + n * p.row_bytes;
  t.lines = (rows * p.row_bytes + 63) / 64;
  t.per_block = (t.lines + blocks - 1) / blocks;
  return t;
}

inline void prefetch_share(const NextTile& t, int64_t block) {
  const int64_t end = (block + 1) * t.per_block < t.lines ? (block + 1) * t.per_block : t.lines;
  for (int64_t line = block * t.per_block; line < end; ++line) {
    _mm_prefetch(reinterpret_cast<const char*>(t.first + 64 * line), _MM_HINT_T0);
  }
}

struct Split16Call {
  const Problem* p;
  const Activations* x;
  Q4Format f;
  int64_t blocks;
};

RowRecords row_records(const Split16Call& c, int64_t m) {
  const uint8_t* row = c.x->split16_records + m * c.x->split16_row_bytes;
  return RowRecords{row, reinterpret_cast<const float*>(row + c.blocks * kCodeBytes)};
}

template <int R>
inline void store_rows(const Split16Call& c, int64_t m0, int64_t n, int cols, const __m512* y) {
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(c.p->y + (m0 + r) * c.p->n + n, mask, y[r]);
}

// Tiles for tile_of (row_tiles.h): Min is std::bool_constant<Q4_1>.
// Up to kTileRows rows: each block decoded in registers and used by all of them.
template <class Min, int R>
struct DirectTile {
  static void run(const Split16Call& c, const TileRows& t, const NextTile& next, int64_t n, int cols) {
    RowRecords rows[R];
    for (int r = 0; r < R; ++r) rows[r] = row_records(c, r);
    __m512 y[R];
    for (int r = 0; r < R; ++r) y[r] = _mm512_setzero_ps();
    DecodedBlock w;
    for (int64_t b = 0; b < c.blocks; ++b) {
      prefetch_share(next, b);
      decode_block(t, b, c.f, &w);
      block_rows<R, Min::value>(w, rows, b, y);
    }
    store_rows<R>(c, 0, n, cols, y);
  }
};

// The same operations, the decoded blocks read back from a panel.
template <class Min, int R>
struct PanelTile {
  static void run(const Split16Call& c, const DecodedBlock* panel, int64_t m0, int64_t n, int cols) {
    RowRecords rows[R];
    for (int r = 0; r < R; ++r) rows[r] = row_records(c, m0 + r);
    __m512 y[R];
    for (int r = 0; r < R; ++r) y[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < c.blocks; ++b) block_rows<R, Min::value>(panel[b], rows, b, y);
    store_rows<R>(c, m0, n, cols, y);
  }
};

thread_local std::vector<DecodedBlock> tls_panel;

template <bool kHasMin>
void split16_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  using Min = std::bool_constant<kHasMin>;
  const Split16Call c{&p, &x, q4_format(p.type), p.k / 32};
  if (p.m <= kTileRows) {
    for (int64_t n = n0; n < n1; n += kCols) {
      const int cols = static_cast<int>(n1 - n < kCols ? n1 - n : kCols);
      const TileRows t = tile_rows(p, n, cols);
      tile_of<Min, DirectTile>(static_cast<int>(p.m), c, t, next_tile(p, n + kCols, n1, c.blocks), n, cols);
    }
    return;
  }
  if (static_cast<int64_t>(tls_panel.size()) < c.blocks) tls_panel.resize(c.blocks);
  DecodedBlock* panel = tls_panel.data();
  for (int64_t chunk = 0; chunk < p.m; chunk += kChunkRows) {
    const int64_t chunk_end = chunk + kChunkRows < p.m ? chunk + kChunkRows : p.m;
    for (int64_t n = n0; n < n1; n += kCols) {
      const int cols = static_cast<int>(n1 - n < kCols ? n1 - n : kCols);
      const TileRows t = tile_rows(p, n, cols);
      for (int64_t b = 0; b < c.blocks; ++b) decode_block(t, b, c.f, &panel[b]);
      for (int64_t m0 = chunk; m0 < chunk_end; m0 += kTileRows) {
        const int rows = static_cast<int>(chunk_end - m0 < kTileRows ? chunk_end - m0 : kTileRows);
        tile_of<Min, PanelTile>(rows, c, static_cast<const DecodedBlock*>(panel), m0, n, cols);
      }
    }
  }
}

// The 16 lanes' sum in a fixed tree (lane i + i + 8, then + 4, + 2, + 1), written out so
// the order is this file's, not a compiler header's (tests/split16_model.py replays it).
inline float block_sum(__m512 s) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// One block's records, vectorized (a scalar loop cost a SmolLM2-135M decode step 0.28 ms
// over its 102 fp32 matrices): dx = max |x| / 32639, q = round(x * (32639 / max |x|)) to
// nearest even,
// hi = floor((q + 128) / 256), lo = q - 256 hi, start = -8 sum q, xsum = sum x.
inline void split16_block(const float* x, int8_t* hi, int8_t* lo, float* meta) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
  const __m512 largest = _mm512_set1_ps(FLT_MAX);
  const bool finite = _mm512_cmp_ps_mask(a0, largest, _CMP_LE_OQ) == 0xFFFF &&
                      _mm512_cmp_ps_mask(a1, largest, _CMP_LE_OQ) == 0xFFFF;
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
  const float xsum = block_sum(_mm512_add_ps(x0, x1));
  // A block of non-finite activations poisons its outputs as fp32 arithmetic would; one
  // too small for a finite 1/scale (below about 1e-34) contributes nothing. (A power-of-two
  // scale would make x / dx exact, but it doubled the largest error: 4.8e-5 against 2.5e-5.)
  float inv = amax > 0.0f ? static_cast<float>(kQuantMax) / amax : 0.0f;
  float dx = amax / static_cast<float>(kQuantMax);
  if (!finite || !(inv <= FLT_MAX)) inv = 0.0f;
  if (inv == 0.0f) dx = finite ? 0.0f : NAN;
  const __m512i limit = _mm512_set1_epi32(kQuantMax), half = _mm512_set1_epi32(128);
  __m512i sum = _mm512_setzero_si512();
  const __m512 xs[2] = {x0, x1};
  for (int i = 0; i < 2; ++i) {
    __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(xs[i], _mm512_set1_ps(inv)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_max_epi32(_mm512_min_epi32(q, limit), _mm512_sub_epi32(_mm512_setzero_si512(), limit));
    const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(q, half), 8);
    const __m512i l = _mm512_sub_epi32(q, _mm512_slli_epi32(h, 8));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + 16 * i), _mm512_cvtepi32_epi8(h));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + 16 * i), _mm512_cvtepi32_epi8(l));
    sum = _mm512_add_epi32(sum, q);
  }
  const int32_t start = -8 * _mm512_reduce_add_epi32(sum);  // the codes' centre, 8, as integers
  meta[0] = dx;
  __builtin_memcpy(meta + 1, &start, 4);
  meta[2] = xsum;
  meta[3] = 0.0f;
}

}  // namespace

bool split16_format(int type) { return type == kQ4_0 || type == kQ4_1; }

int64_t split16_record_row_bytes(int64_t k) { return (k / 32 * (kCodeBytes + kMetaBytes) + 63) / 64 * 64; }

void split16_records(const float* a, int64_t k, uint8_t* out) {
  const int64_t blocks = k / 32;
  float* meta = reinterpret_cast<float*>(out + blocks * kCodeBytes);
  for (int64_t b = 0; b < blocks; ++b) {
    int8_t* hi = reinterpret_cast<int8_t*>(out + b * kCodeBytes);
    split16_block(a + 32 * b, hi, hi + 32, meta + 4 * b);
  }
}

void avx512_vnni_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (x.split16_records == nullptr) {
    avx512_fp32_range(p, x, s, n0, n1);
  } else if (p.type == kQ4_1) {
    split16_range<true>(p, x, n0, n1);
  } else {
    split16_range<false>(p, x, n0, n1);
  }
}

}  // namespace clika_kernels
#endif

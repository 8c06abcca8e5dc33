// AVX-512 BF16 split engine for Q4_0 and Q4_1 at fp32-grade precision: each activation is
// split into two bf16 halves, x = hi + lo (|x - hi - lo| <= 2^-18 |x|), and vdpbf16ps
// multiplies 32 codes by 32 of them into 16 fp32 lanes (each product exact, each sum
// rounded as in fp32).
//
// Why: the fp32 engine's table lookups and nibble widening cost three shuffles per block
// and it reads 4 bytes of activations per weight for every weight row; at K = 576
// (SmolLM2) it was bound by that work, not by memory. Here the codes need no shuffle and
// no conversion: a stored row is read in 64-byte loads, and each 16-bit word of a load
// gives four codes by a shift and one ternary-logic op: (word >> s) & 0x78 | 0x4180 is the
// bf16 number 16 + q (exponent 2^4, q in the mantissa's top bits). The activations are
// arranged once per call in that same order (bf16_layout), header bytes meeting zeros, so
// a load's 16 dword lanes each hold 8 codes of one block and its scale is applied per lane
// after the dot products: for 32-bit lane i of load t, T = sum of (16 + q) * x over its 8
// codes, and the lane adds d * (T - 16 * XL) + m * XL (Q4_1; Q4_0: d * (T - 24 * XL)),
// XL being the lane's activation sum. The block scales are picked per load from the row's
// own registers (one word permute over this load and the previous one), so nothing of a
// weight row goes through memory but its bytes.
//
// Every output runs the same operations whatever rows are computed beside it: a tile of
// weight rows x activation rows only shares loads, so a row alone and in a batch give the
// same bits, at every M (decode and prefill alike).
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")

#include <algorithm>
#include <vector>

#include "activations.h"
#include "formats.h"

namespace clika_kernels {
namespace {

struct SplitFormat {
  int bytes;   // per 32-weight block
  int head;    // bytes before the nibble run: d (and m)
  bool has_m;  // Q4_1: w = d * q + m; Q4_0: w = d * (q - 8)
  float offset;  // the bf16 code is 16 + q, so w = d * code - offset * d (+ m)
};

bool split_format(int type, SplitFormat* f) {
  if (type == kQ4_0) *f = SplitFormat{18, 2, false, 24.0f};
  else if (type == kQ4_1) *f = SplitFormat{20, 4, true, 16.0f};
  else return false;
  return true;
}

// Where each code of a stored row meets its activation, for one (format, K): per 64-byte
// load t, per shift s (0..3: the low and high nibble of a word's first byte, then of its
// second), per 16-bit word w, the weight index or -1 (header bytes, bytes past the row);
// and per load the word indices, into [previous load, this load], of each dword lane's d
// (words 0..15) and m (words 16..31).
struct Bf16Layout {
  int type = -1;
  int64_t k = 0;
  int64_t loads = 0;
  std::vector<int32_t> slots;     // [loads][4][32]
  std::vector<uint16_t> heads;    // [loads][32]
};

Bf16Layout build_layout(int type, int64_t k) {
  SplitFormat f;
  split_format(type, &f);
  Bf16Layout l;
  l.type = type;
  l.k = k;
  const int64_t row = k / 32 * f.bytes;
  l.loads = (row + 63) / 64;
  l.slots.assign(static_cast<size_t>(l.loads * 128), -1);
  l.heads.assign(static_cast<size_t>(l.loads * 32), 0);
  for (int64_t t = 0; t < l.loads; ++t) {
    for (int s = 0; s < 4; ++s) {
      for (int w = 0; w < 32; ++w) {
        const int64_t o = 64 * t + 2 * w + (s >= 2 ? 1 : 0);
        if (o >= row || o % f.bytes < f.head) continue;
        const int64_t j = o % f.bytes - f.head;
        l.slots[static_cast<size_t>((t * 4 + s) * 32 + w)] = static_cast<int32_t>(32 * (o / f.bytes) + j + 16 * (s & 1));
      }
    }
    const int64_t live = std::min<int64_t>(64, row - 64 * t);
    for (int i = 0; i < 16; ++i) {
      const int64_t o = 64 * t + 4 * i;
      // Past the row: a word of this load beyond its live bytes, which the masked load zeroes.
      int64_t d_word = 32 + live / 2, m_word = d_word;
      if (o < row) {
        const int64_t head_word = o / f.bytes * f.bytes / 2;  // the block's d, a word index in the row
        d_word = head_word - 32 * (t - 1);
        m_word = d_word + 1;
      }
      l.heads[static_cast<size_t>(t * 32 + i)] = static_cast<uint16_t>(d_word);
      l.heads[static_cast<size_t>(t * 32 + 16 + i)] = static_cast<uint16_t>(f.has_m ? m_word : d_word);
    }
  }
  return l;
}

// Layouts are a few KB and a model has a handful of (format, K) pairs; each thread keeps its own.
const Bf16Layout& bf16_layout(int type, int64_t k) {
  thread_local std::vector<Bf16Layout> cache;
  for (const Bf16Layout& l : cache) {
    if (l.type == type && l.k == k) return l;
  }
  if (cache.size() >= 16) cache.clear();
  cache.push_back(build_layout(type, k));
  return cache.back();
}

// Pieces per activation: 3 make x exact (8 + 8 + 8 significant bits), so the only error
// left is fp32 rounding of the sums; 2 leave up to 2^-18 |x| (3.4e-6 of the output's
// scale on the kernel tests, against 1e-6 for the fp32 paths).
constexpr int kPieces = 2;
// A load's record for one activation row, in 64-byte vectors: the bf16 pieces of each
// shift (4 x kPieces), then each lane's -offset * XL (the dot products' start), then XL.
constexpr int kStartVector = 4 * kPieces;
constexpr int kSumVector = kStartVector + 1;
constexpr int64_t kLoadRecordBytes = 64 * (kSumVector + 1);

// The activations of 32 word slots as kPieces bf16 vectors whose sum is x: the first is x
// rounded to bf16, each next one the rest rounded again.
inline void split_slots(const float* a, const int32_t* slots, __m512i* pieces) {
  __m256bh half[kPieces][2];
  for (int h = 0; h < 2; ++h) {
    const __m512i idx = _mm512_loadu_si512(slots + 16 * h);
    const __mmask16 live = _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512());
    __m512 rest = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx, a, 4);
    for (int i = 0; i < kPieces; ++i) {
      half[i][h] = _mm512_cvtneps_pbh(rest);
      const __m512 piece = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)half[i][h]), 16));
      rest = _mm512_sub_ps(rest, piece);
    }
  }
  for (int i = 0; i < kPieces; ++i) {
    pieces[i] = _mm512_inserti64x4(_mm512_castsi256_si512((__m256i)half[i][0]), (__m256i)half[i][1], 1);
  }
}

// The codes of one 64-byte load: 16 + q as bf16, for the four nibbles of each word.
struct Codes {
  __m512i c[4];
  explicit Codes(__m512i v) {
    const __m512i mask = _mm512_set1_epi16(0x0078), one = _mm512_set1_epi16(0x4180);
    c[0] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(v, 3), mask, one, 0xEA);  // (a & b) | c
    c[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 1), mask, one, 0xEA);
    c[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 5), mask, one, 0xEA);
    c[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 9), mask, one, 0xEA);
  }
};

inline __m512 dot(const Codes& w, const __m512* x) {
  __m512 t0 = x[kStartVector];
  __m512 t1 = _mm512_setzero_ps();
  _Pragma("GCC unroll 4") for (int s = 0; s < 4; ++s) {
    _Pragma("GCC unroll 3") for (int i = 0; i < kPieces; ++i) {
      const int slot = s * kPieces + i;
      if (slot % 2 == 0) {
        t0 = _mm512_dpbf16_ps(t0, (__m512bh)w.c[s], (__m512bh)_mm512_castps_si512(x[slot]));
      } else {
        t1 = _mm512_dpbf16_ps(t1, (__m512bh)w.c[s], (__m512bh)_mm512_castps_si512(x[slot]));
      }
    }
  }
  return _mm512_add_ps(t0, t1);
}

// NW weight rows (n..) x R activation rows (m0..).
template <bool HasM, int NW, int R>
void tile(const Problem& p, const Activations& x, const Bf16Layout& l, int64_t n, int64_t m0) {
  __m512 acc[NW][R];
  __m512i prev[NW];
  const uint8_t* rows[NW];
  for (int w = 0; w < NW; ++w) {
    rows[w] = p.b + (n + w) * p.row_bytes;
    prev[w] = _mm512_setzero_si512();
    for (int r = 0; r < R; ++r) acc[w][r] = _mm512_setzero_ps();
  }
  const uint8_t* records = x.bf16_records + m0 * x.bf16_row_bytes;
  // The tile reads its rows' bytes across, NW streams a row apart, which the hardware
  // prefetchers follow poorly from DRAM; the next tile's weight rows are asked for in
  // order, about NW lines a load.
  const uint8_t* ahead = rows[0] + NW * p.row_bytes;
  for (int64_t t = 0; t < l.loads; ++t) {
    _Pragma("GCC unroll 4") for (int j = 0; j < NW; ++j) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * (NW * t + j)), _MM_HINT_T0);
    const int64_t live = p.row_bytes - 64 * t;
    const __mmask64 bytes = live >= 64 ? ~0ull : (1ull << live) - 1;
    const __m512i words = _mm512_loadu_si512(l.heads.data() + 32 * t);
    _Pragma("GCC unroll 4") for (int w = 0; w < NW; ++w) {
      const __m512i v = _mm512_maskz_loadu_epi8(bytes, rows[w] + 64 * t);
      const __m512i heads = _mm512_permutex2var_epi16(prev[w], words, v);
      prev[w] = v;
      const __m512 d = _mm512_cvtph_ps(_mm512_castsi512_si256(heads));
      const __m512 m = HasM ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(heads, 1)) : _mm512_setzero_ps();
      const Codes codes(v);
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        const __m512* record = reinterpret_cast<const __m512*>(records + r * x.bf16_row_bytes + t * kLoadRecordBytes);
        acc[w][r] = _mm512_fmadd_ps(dot(codes, record), d, acc[w][r]);
        if constexpr (HasM) acc[w][r] = _mm512_fmadd_ps(m, record[kSumVector], acc[w][r]);
      }
    }
  }
  for (int w = 0; w < NW; ++w) {
    for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n + w] = _mm512_reduce_add_ps(acc[w][r]);
  }
}

template <bool HasM, int NW>
void tile_rows(int rows, const Problem& p, const Activations& x, const Bf16Layout& l, int64_t n, int64_t m0) {
  switch (rows) {
    case 4: tile<HasM, NW, 4>(p, x, l, n, m0); break;
    case 3: tile<HasM, NW, 3>(p, x, l, n, m0); break;
    case 2: tile<HasM, NW, 2>(p, x, l, n, m0); break;
    default: tile<HasM, NW, 1>(p, x, l, n, m0); break;
  }
}

// Activation rows in tiles of 4 (their records stay in L1), the task's weight rows in
// groups sharing each activation load: 4 at one row (decode), 2 beside more rows.
template <bool HasM>
void split_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  const Bf16Layout& l = bf16_layout(p.type, p.k);
  for (int64_t m0 = 0; m0 < p.m; m0 += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, p.m - m0));
    int64_t n = n0;
    if (rows == 1) {
      for (; n + 4 <= n1; n += 4) tile_rows<HasM, 4>(rows, p, x, l, n, m0);
    }
    for (; n + 2 <= n1; n += 2) tile_rows<HasM, 2>(rows, p, x, l, n, m0);
    if (n < n1) tile_rows<HasM, 1>(rows, p, x, l, n, m0);
  }
}

}  // namespace

bool bf16_split_format(int type) {
  SplitFormat f;
  return split_format(type, &f);
}

int64_t bf16_record_row_bytes(int type, int64_t k) {
  SplitFormat f;
  if (!split_format(type, &f)) return 0;
  return (k / 32 * f.bytes + 63) / 64 * kLoadRecordBytes;
}

void avx512_bf16_records(const float* a, int type, int64_t k, uint8_t* out) {
  SplitFormat f;
  split_format(type, &f);
  const Bf16Layout& l = bf16_layout(type, k);
  const __m512i ones = _mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int64_t t = 0; t < l.loads; ++t) {
    __m512i* record = reinterpret_cast<__m512i*>(out + t * kLoadRecordBytes);
    __m512 xl = _mm512_setzero_ps();
    for (int s = 0; s < 4; ++s) {
      __m512i pieces[kPieces];
      split_slots(a, l.slots.data() + (t * 4 + s) * 32, pieces);
      for (int i = 0; i < kPieces; ++i) {
        _mm512_store_si512(record + s * kPieces + i, pieces[i]);
        xl = _mm512_dpbf16_ps(xl, (__m512bh)ones, (__m512bh)pieces[i]);
      }
    }
    _mm512_store_ps(reinterpret_cast<float*>(record + kStartVector), _mm512_mul_ps(_mm512_set1_ps(-f.offset), xl));
    _mm512_store_ps(reinterpret_cast<float*>(record + kSumVector), xl);
  }
}

void avx512_bf16_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  if (x.bf16_records == nullptr) {
    avx512_fp32_range(p, x, s, n0, n1);
  } else if (p.type == kQ4_1) {
    split_range<true>(p, x, n0, n1);
  } else {
    split_range<false>(p, x, n0, n1);
  }
}

}  // namespace clika_kernels
#endif

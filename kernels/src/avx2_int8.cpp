// AVX2 int8 engine: per 32-weight piece, the 32 codes against the row's int8 activations
// with vpmaddubsw + vpmaddwd (8 lanes of 4 products each: lanes 0-3 the piece's first
// 16-group, 4-7 its second), converted and scaled by weight scale * activation scale:
//   y = sum_b (scale_b * da_b) * sum_{k in b} code_k * qa_k  +  sum_b bias_b * da_b * sum qa
// Signed formats (Q8_0, whose codes q + 128 would overflow vpmaddubsw's 16-bit pair sums,
// and Q6_K centred on its zero point) are computed on their signed codes (|q| times qa with
// q's sign), which needs no bias term. Every row sees the same operations in the same
// order whatever M is.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c")

#include <type_traits>

#include "avx2_pieces.h"

namespace clika_kernels {
namespace {

// The direct walk (avx2_pieces.h) for up to four activation rows: per piece its 32 codes
// as bytes once, then per row one integer dot. An Even piece's products wait for the Odd
// piece after it, and the pair is added as integers (exact) into one vector, lanes
// [even, even, odd, odd] per 128-bit half (the low half the pieces' first 16-groups, the
// high half their second: Q6_K's two scales), so both pieces take one convert, one multiply
// by weight scale * da and one FMA a row, where each took its own. Codes below 64 (every
// format but Q8_0) add the pair's 16-bit pair sums with vphaddw before widening (each sum
// at most 4 * 32 * 127, no overflow): one vpmaddwd for the pair. A Lone piece is scaled on
// its own. Biases meet the pieces' da * sum(qa) (sum32), 8 at a time.
template <class Format>
struct DirectInt8 {
  // Q8_0's codes reach 127: two of its 16-bit pair sums may overflow, so it widens each piece.
  static constexpr bool kWide = std::is_same<Format, Q8_0Pieces>::value;

  template <int R>
  struct Tile : PieceBiases<R> {
    const int8_t* qa[R];
    const float* da[R];
    __m256 acc[R];      // one chain a row: two would not fit four rows' registers beside the pairs
    __m256i even[R];    // the Even piece's products, per row (16-bit pair sums, or 32-bit if kWide)
    const float* even_scales;

    // Per row, vpmaddubsw's 16 pair sums of the piece's codes and the row's activations.
    template <class Piece>
    [[gnu::always_inline]] void products(int64_t b, const Piece& piece, __m256i* sums) const {
      const __m256i q = piece.bytes();
      const __m256i u = Format::kSigned ? _mm256_abs_epi8(q) : q;
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa[r] + 32 * b));
        if (Format::kSigned) a = _mm256_sign_epi8(a, q);
        sums[r] = _mm256_maddubs_epi16(u, a);
        if (kWide) sums[r] = _mm256_madd_epi16(sums[r], _mm256_set1_epi16(1));
      }
    }

    // The pair's weight scales in its lanes' order, from where the walk stored them.
    static __m256 pair_scales(const float* at) {
      if (Format::kSplit) {  // at: [even lo, even hi, odd lo, odd hi]
        const __m256 four = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(at));
        return _mm256_permutevar8x32_ps(four, _mm256_setr_epi32(0, 0, 2, 2, 1, 1, 3, 3));
      }
      const __m256 two = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(at)));
      return _mm256_permute_ps(two, 0x50);  // [even, even, odd, odd] in each half
    }

    template <class Piece>
    [[gnu::always_inline]] void piece(Even, int64_t b, const Piece& piece, Scales d) {
      products(b, piece, even);
      even_scales = d.at;
    }

    template <class Piece>
    [[gnu::always_inline]] void piece(Odd, int64_t b, const Piece& piece, Scales) {
      __m256i odd[R];
      products(b, piece, odd);
      const __m256 scale = pair_scales(even_scales);
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        const __m256i pair = kWide ? _mm256_hadd_epi32(even[r], odd[r])
                                   : _mm256_madd_epi16(_mm256_hadd_epi16(even[r], odd[r]), _mm256_set1_epi16(1));
        // group_da holds each piece's da twice: [da even, da even, da odd, da odd]
        const __m256 da_pair = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(da[r] + 2 * (b - 1)));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pair), _mm256_mul_ps(scale, da_pair), acc[r]);
      }
    }

    template <class Piece>
    [[gnu::always_inline]] void piece(Lone, int64_t b, const Piece& piece, Scales d) {
      __m256i lone[R];
      products(b, piece, lone);
      if (!kWide) {
        for (int r = 0; r < R; ++r) lone[r] = _mm256_madd_epi16(lone[r], _mm256_set1_epi16(1));
      }
      // lanes 0-3 hold the first 16-group's sums, 4-7 the second's
      const __m256 scale = _mm256_set_m128(_mm_set1_ps(d.hi), _mm_set1_ps(d.lo));
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        const __m256 both = _mm256_mul_ps(scale, _mm256_broadcast_ss(da[r] + 2 * b));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lone[r]), both, acc[r]);
      }
    }

    static void run(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
      Tile t;
      t.start_biases(x.sum32, m0, p.k / 32);
      for (int r = 0; r < R; ++r) {
        t.qa[r] = x.qa + (m0 + r) * p.k;
        t.da[r] = x.group_da + (m0 + r) * (p.k / 16);
        t.acc[r] = _mm256_setzero_ps();
      }
      Format::walk(p.b + n * p.row_bytes, p.k, t);
      for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n] = t.with_biases(r, t.acc[r]);
    }
  };
};

template <class Format>
void direct_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  avx2_direct_range<DirectInt8<Format>::template Tile>(p, x, n0, n1);
}

}  // namespace

void avx2_int8_range(const Problem& p, const Activations& x, const RowScratch&, int64_t n0, int64_t n1) {
  switch (p.type) {
    case kQ4_0: direct_range<Q4_0Pieces>(p, x, n0, n1); break;
    case kQ4_1: direct_range<Q4_1Pieces>(p, x, n0, n1); break;
    case kQ4_K: direct_range<Q4_KPieces>(p, x, n0, n1); break;
    case kQ8_0: direct_range<Q8_0Pieces>(p, x, n0, n1); break;
    case kQ5_0: direct_range<Q5_0Pieces>(p, x, n0, n1); break;
    case kQ5_1: direct_range<Q5_1Pieces>(p, x, n0, n1); break;
    case kQ5_K: direct_range<Q5_KPieces>(p, x, n0, n1); break;
    case kQ6_K: direct_range<Q6_KPieces>(p, x, n0, n1); break;
    default: unwalked_rows(p, n0, n1); break;
  }
}

}  // namespace clika_kernels
#endif

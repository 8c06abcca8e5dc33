// AVX2 int8 engine: per 32-weight piece, the 32 codes against the row's int8 activations
// with vpmaddubsw + vpmaddwd (8 lanes of 4 products each: lanes 0-3 the piece's first
// 16-group, 4-7 its second), converted once and scaled by weight scale * activation scale:
//   y = sum_b (scale_b * da_b) * sum_{k in b} code_k * qa_k  +  sum_b bias_b * da_b * sum qa
// Signed formats (Q8_0, whose codes q + 128 would overflow vpmaddubsw's 16-bit pair sums,
// and Q6_K centred on its zero point) are computed on their signed codes (|q| times qa with
// q's sign), which needs no bias term. Every row sees the same operations in the same
// order whatever M is.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c")

#include "avx2_pieces.h"

namespace clika_kernels {
namespace {

inline __m256i pair_sums(__m256i u, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

// The direct walk (avx2_pieces.h) for up to four activation rows: per piece its 32 codes
// as bytes once, then per row one integer dot, scaled by scale * da into alternating
// accumulators; biases meet the pieces' da * sum(qa) (sum32), 8 pieces at a time.
template <class Format>
struct DirectInt8 {
  template <int R>
  struct Tile : PieceBiases<R> {
    const int8_t* qa[R];
    const float* da[R];
    __m256 acc[R][2];

    template <class Parity, class Piece>
    [[gnu::always_inline]] void piece(Parity, int64_t b, const Piece& piece, Scales d) {
      constexpr int P = Parity::value;
      const __m256i q = piece.bytes();
      const __m256i u = Format::kSigned ? _mm256_abs_epi8(q) : q;
      // lanes 0-3 hold the first 16-group's sums, 4-7 the second's
      const __m256 scale = Format::kSplit ? _mm256_set_m128(_mm_set1_ps(d.hi), _mm_set1_ps(d.lo)) : _mm256_set1_ps(d.lo);
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa[r] + 32 * b));
        if (Format::kSigned) a = _mm256_sign_epi8(a, q);
        const __m256 both = _mm256_mul_ps(scale, _mm256_broadcast_ss(da[r] + 2 * b));
        acc[r][P] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pair_sums(u, a)), both, acc[r][P]);
      }
    }

    static void run(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
      Tile t;
      t.start_biases(x.sum32, m0, p.k / 32);
      for (int r = 0; r < R; ++r) {
        t.qa[r] = x.qa + (m0 + r) * p.k;
        t.da[r] = x.group_da + (m0 + r) * (p.k / 16);
        t.acc[r][0] = t.acc[r][1] = _mm256_setzero_ps();
      }
      Format::walk(p.b + n * p.row_bytes, p.k, t);
      for (int r = 0; r < R; ++r) p.y[(m0 + r) * p.n + n] = t.with_biases(r, _mm256_add_ps(t.acc[r][0], t.acc[r][1]));
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

// AVX2 fp32 engine: per 32-weight piece (a block, a K-quant sub-block) the codes are
// widened to fp32 and multiplied into the activations, and the piece's sum meets its
// scale once:
//   y = sum_b scale_b * sum_{k in b} code_k * x_k  (+ sum_b bias_b * sum_{k in b} x_k)
// Signed and symmetric formats take their codes centred on the zero point as integers
// (exact), so their weights are scale * (q - zero) with no bias term; the formats with a
// bias of their own add it against the activations' piece sums, prepared once per call.
// A weight thus costs a widen, a convert and one FMA per activation row, where forming
// the weight first (code * scale + bias) spent a second FMA and a round trip to memory.
// Every row sees the same operations in the same order whatever M is.
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c")

#include "avx2_pieces.h"

namespace clika_kernels {
namespace {

// The direct walk (avx2_pieces.h) for up to four activation rows: per piece the four code
// vectors widened once, then per row sum(code * x) over the piece, scaled into alternating
// accumulators; biases meet the pieces' activation sums (xsum per 32), 8 pieces at a time.
template <class Format>
struct DirectFp32 {
  template <int R>
  struct Tile : PieceBiases<R> {
    const float* a[R];
    __m256 acc[R][2];
    __m256 acc_high[R][2];  // kSplit: the second 16-group's own accumulators

    template <class Parity, class Piece>
    [[gnu::always_inline]] void piece(Parity, int64_t b, const Piece& piece, Scales d) {
      constexpr int P = Parity::value;
      __m256 c[4];
      piece.floats(c);
      const __m256 low = _mm256_set1_ps(d.lo);
      const __m256 high = _mm256_set1_ps(d.hi);
      _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
        const float* xb = a[r] + 32 * b;
        if (Format::kSplit) {
          const __m256 t0 = _mm256_fmadd_ps(c[1], _mm256_loadu_ps(xb + 8), _mm256_mul_ps(c[0], _mm256_loadu_ps(xb)));
          const __m256 t1 = _mm256_fmadd_ps(c[3], _mm256_loadu_ps(xb + 24), _mm256_mul_ps(c[2], _mm256_loadu_ps(xb + 16)));
          acc[r][P] = _mm256_fmadd_ps(t0, low, acc[r][P]);
          acc_high[r][P] = _mm256_fmadd_ps(t1, high, acc_high[r][P]);
        } else {
          __m256 t = _mm256_mul_ps(c[0], _mm256_loadu_ps(xb));
          t = _mm256_fmadd_ps(c[1], _mm256_loadu_ps(xb + 8), t);
          t = _mm256_fmadd_ps(c[2], _mm256_loadu_ps(xb + 16), t);
          t = _mm256_fmadd_ps(c[3], _mm256_loadu_ps(xb + 24), t);
          acc[r][P] = _mm256_fmadd_ps(t, low, acc[r][P]);
        }
      }
    }

    static void run(const Problem& p, const Activations& x, int64_t n, int64_t m0) {
      Tile t;
      t.start_biases(x.xsum, m0, p.k / 32);
      for (int r = 0; r < R; ++r) {
        t.a[r] = x.a + (m0 + r) * p.k;
        t.acc[r][0] = t.acc[r][1] = t.acc_high[r][0] = t.acc_high[r][1] = _mm256_setzero_ps();
      }
      Format::walk(p.b + n * p.row_bytes, p.k, t);
      for (int r = 0; r < R; ++r) {
        __m256 sum = _mm256_add_ps(t.acc[r][0], t.acc[r][1]);
        if (Format::kSplit) sum = _mm256_add_ps(sum, _mm256_add_ps(t.acc_high[r][0], t.acc_high[r][1]));
        p.y[(m0 + r) * p.n + n] = t.with_biases(r, sum);
      }
    }
  };
};

template <class Format>
void direct_range(const Problem& p, const Activations& x, int64_t n0, int64_t n1) {
  avx2_direct_range<DirectFp32<Format>::template Tile>(p, x, n0, n1);
}

}  // namespace

int avx2_fp32_sum_group(int type) {
  switch (type) {
    case kQ4_0:
    case kQ4_1:
    case kQ4_K:
    case kQ5_1:
    case kQ5_K: return 32;  // the direct walks' biases, one a piece
    default: return 0;      // Q5_0, Q8_0, Q6_K: codes centred on their zero point, no bias
  }
}

void avx2_fp32_range(const Problem& p, const Activations& x, const RowScratch&, int64_t n0, int64_t n1) {
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

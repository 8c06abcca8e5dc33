// The scalar reference engines: plain C++, a double accumulator per output. Every other
// engine is tested against these, and they run where no SIMD path applies.
#include "row_loop.h"

namespace clika_kernels {
namespace {

struct ScalarFp32 {
  static void prepare(const Problem& p, const RowScratch& s) {
    for (int64_t k = 0; k < p.k; ++k) {
      s.wf[k] = s.scale16[k / 16] * static_cast<float>(s.codes[k]) + s.bias16[k / 16];
    }
  }
  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    for (int r = 0; r < R; ++r) {
      const float* a = x.a + (m0 + r) * p.k;
      double acc = 0.0;
      for (int64_t k = 0; k < p.k; ++k) acc += static_cast<double>(s.wf[k]) * a[k];
      out[r] = static_cast<float>(acc);
    }
  }
};

// y = sum over 4-byte lanes of (codes . qa) * scale * da, plus sum over 16-groups of
// bias * (da * sum qa): the integer parts are exact, so every int8 engine agrees with
// this one up to the fp32 rounding of those two sums.
struct ScalarInt8 {
  static void prepare(const Problem&, const RowScratch&) {}
  template <int R>
  static void dot(const Problem& p, const Activations& x, const RowScratch& s, int64_t m0, float* out) {
    for (int r = 0; r < R; ++r) {
      const int8_t* qa = x.qa + (m0 + r) * p.k;
      const float* lane_da = x.lane_da + (m0 + r) * (p.k / 4);
      const float* sum16 = x.sum16 + (m0 + r) * (p.k / 16);
      double acc = 0.0;
      for (int64_t l = 0; l < p.k / 4; ++l) {
        int32_t d = 0;
        for (int j = 0; j < 4; ++j) d += static_cast<int32_t>(s.codes[4 * l + j]) * qa[4 * l + j];
        acc += static_cast<double>(d) * (s.scale16[l / 4] * lane_da[l]);
      }
      for (int64_t g = 0; g < p.k / 16; ++g) acc += static_cast<double>(s.bias16[g]) * sum16[g];
      out[r] = static_cast<float>(acc);
    }
  }
};

}  // namespace

void scalar_fp32_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_range<ScalarFp32>(p, x, s, n0, n1);
}

void scalar_int8_range(const Problem& p, const Activations& x, const RowScratch& s, int64_t n0, int64_t n1) {
  run_range<ScalarInt8>(p, x, s, n0, n1);
}

}  // namespace clika_kernels

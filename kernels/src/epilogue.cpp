#include "epilogue.h"

#include "exp_reduced.h"

namespace clika_kernels {
namespace {

// One loop the compiler vectorizes at each target's width (the build's -fno-trapping-math
// lets it turn the clamp into min/max); the operations per element stay the same.
__attribute__((always_inline)) inline void swiglu_span(const float* __restrict gate, const float* __restrict up,
                                                       float* __restrict y, int64_t count) {
  for (int64_t j = 0; j < count; ++j) y[j] = gate[j] / (1.0f + exp_reduced(-gate[j])) * up[j];
}

void swiglu_baseline(const float* gate, const float* up, float* y, int64_t count) {
  swiglu_span(gate, up, y, count);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void swiglu_avx2(const float* gate, const float* up, float* y, int64_t count) {
  swiglu_span(gate, up, y, count);
}

__attribute__((target("avx512f"))) void swiglu_avx512(const float* gate, const float* up, float* y,
                                                      int64_t count) {
  swiglu_span(gate, up, y, count);
}
#endif

using SpanFn = void (*)(const float*, const float*, float*, int64_t);

SpanFn span_for(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kAvx2: return swiglu_avx2;
    case Isa::kAvx512:
    case Isa::kAvx512Vnni:
    case Isa::kAvx512Bf16: return swiglu_avx512;
    default: return swiglu_baseline;
  }
#else
  (void)isa;
  return swiglu_baseline;  // aarch64's baseline is NEON
#endif
}

}  // namespace

void swiglu_rows(const float* full, int64_t full_stride, int64_t half, float* y, int64_t m, Isa isa) {
  const SpanFn span = span_for(isa);
  for (int64_t r = 0; r < m; ++r) span(full + r * full_stride, full + r * full_stride + half, y + r * half, half);
}

}  // namespace clika_kernels

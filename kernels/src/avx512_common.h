// Helpers shared by the AVX-512 engines; included after each file's target options.
#pragma once

#include <immintrin.h>

#include "kernel_api.h"

namespace clika_kernels {
namespace {

// sum over 16-groups g of bias16[g] * sum16[g], in one fixed order (groups is even).
inline float avx512_bias_dot(const float* bias16, const float* sum16, int64_t groups) {
  __m512 acc = _mm512_setzero_ps();
  int64_t g = 0;
  for (; g + 16 <= groups; g += 16) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(bias16 + g), _mm512_loadu_ps(sum16 + g), acc);
  }
  if (g < groups) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (groups - g)) - 1u);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, bias16 + g), _mm512_maskz_loadu_ps(tail, sum16 + g), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace
}  // namespace clika_kernels

// The arithmetic of one StepAttention task, written once as plain loops over 16-float lane
// arrays: each ISA's build (attention_isa.cpp, attention_avx2.cpp, attention_avx512.cpp)
// inlines these and the compiler vectorizes them at its width; AVX2 and AVX-512 replace the
// two inner loops (PortableLoops) with their own of the same operations. No loop reassociates a sum (-ffp-contract=off, no fast-math), so every
// ISA runs the same IEEE operations in the same order and gives the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention.h"
#include "exp_reduced.h"

namespace clika_kernels {
namespace attention_math {

constexpr int kLanes = 16;  // head_dim is a multiple of this (checked by the op)

// x[0, r) of one head rotated by (cos, sin)[r/2] in halves: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s).
__attribute__((always_inline)) inline void rotate_half(const float* __restrict x, const float* __restrict cos,
                                                       const float* __restrict sin, int64_t half,
                                                       int64_t head_dim, float* __restrict out) {
  for (int64_t i = 0; i < half; ++i) {
    out[i] = x[i] * cos[i] - x[i + half] * sin[i];
    out[i + half] = x[i + half] * cos[i] + x[i] * sin[i];
  }
  for (int64_t i = 2 * half; i < head_dim; ++i) out[i] = x[i];
}

// q . k over head_dim: 16 lane sums over the head's 16-float pieces in order, then halved.
__attribute__((always_inline)) inline float dot(const float* __restrict q, const float* __restrict k,
                                                int64_t head_dim) {
  float lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = q[l] * k[l];
  for (int64_t c = kLanes; c < head_dim; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += q[c + l] * k[c + l];
  }
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

// The sum of x[0, count) in a fixed order any width can run: 16 lane sums of every 16th
// element, then halved like dot's.
__attribute__((always_inline)) inline float lane_sum(const float* __restrict x, int64_t count) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += x[j + l];
  }
  for (int l = 0; j + l < count; ++l) lanes[l] += x[j + l];
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

__attribute__((always_inline)) inline float lane_max(const float* __restrict x, int64_t count) {
  float lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = x[0];
  int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  }
  for (int l = 0; j + l < count; ++l) lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  float peak = lanes[0];
  for (int l = 1; l < kLanes; ++l) peak = lanes[l] > peak ? lanes[l] : peak;
  return peak;
}

// The portable forms of the two inner loops; an ISA may supply its own with the same bits.
struct PortableLoops {
  // scores[g * stride + j] = dot(query g, key first + j) for j < count.
  static void scores(const float* __restrict queries, int group, const float* __restrict keys, int64_t first,
                     int64_t count, int64_t head_dim, float* __restrict scores, int64_t stride) {
    for (int64_t j = 0; j < count; ++j) {
      const float* key = keys + (first + j) * head_dim;
      for (int g = 0; g < group; ++g) scores[g * stride + j] = dot(queries + g * head_dim, key, head_dim);
    }
  }
  // out[g][d] = sum over j in order of w[g * stride + j] * v[first + j][d].
  static void values(const float* __restrict weights, int group, const float* __restrict values, int64_t first,
                     int64_t count, int64_t head_dim, int64_t stride, float* __restrict out) {
    for (int g = 0; g < group; ++g) {
      float* o = out + g * head_dim;
      const float* w = weights + g * stride;
      for (int64_t d = 0; d < head_dim; ++d) o[d] = 0.0f;
      for (int64_t j = 0; j < count; ++j) {
        const float* v = values + (first + j) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) o[d] += w[j] * v[d];
      }
    }
  }
};

// tanh(x) = 1 - 2 / (e^2x + 1), through the same e^x as every other path.
__attribute__((always_inline)) inline float tanh_reduced(float x) {
  return 1.0f - 2.0f / (exp_reduced(2.0f * x) + 1.0f);
}

// Each of `group` query heads' softmax weights over keys [first, last] of one KV head
// (scores[g * stride + j - first]), and each head's sum of weights in sums[g].
template <class Loops>
__attribute__((always_inline)) inline void softmax_weights(const float* __restrict queries, int group,
                                                           const float* __restrict keys, int64_t first,
                                                           int64_t last, const AttentionShape& s,
                                                           float* __restrict scores, int64_t stride,
                                                           float* __restrict sums) {
  const int64_t count = last - first + 1;
  Loops::scores(queries, group, keys, first, count, s.head_dim, scores, stride);
  for (int g = 0; g < group; ++g) {
    float* row = scores + g * stride;
    for (int64_t j = 0; j < count; ++j) row[j] *= s.scale;
    if (s.softcap > 0.0f) {
      const float inv = 1.0f / s.softcap;
      for (int64_t j = 0; j < count; ++j) row[j] = s.softcap * tanh_reduced(row[j] * inv);
    }
    const float peak = lane_max(row, count);
    for (int64_t j = 0; j < count; ++j) row[j] = exp_reduced(row[j] - peak);
    sums[g] = lane_sum(row, count);
  }
}

// One task: packed token t's query heads that share KV head h, over its row's visible keys.
template <class Loops>
__attribute__((always_inline)) inline void attend(const AttentionTask& task, const AttentionShape& s,
                                                  float* __restrict scratch) {
  const int group = static_cast<int>(s.num_heads / s.kv_heads);
  const int64_t stride = task.last + 1;
  float* queries = scratch;                       // [group, head_dim]
  float* sums = queries + group * s.head_dim;     // [group], padded to 16
  float* scores = sums + kLanes;                  // [group, stride]
  for (int g = 0; g < group; ++g) {
    const float* q = task.query + g * s.head_dim;
    float* rotated = queries + g * s.head_dim;
    if (task.cos != nullptr) {
      rotate_half(q, task.cos, task.sin, s.rotary_half, s.head_dim, rotated);
    } else {
      for (int64_t d = 0; d < s.head_dim; ++d) rotated[d] = q[d];
    }
  }
  softmax_weights<Loops>(queries, group, task.keys, task.first, task.last, s, scores, stride, sums);
  Loops::values(scores, group, task.values, task.first, task.last - task.first + 1, s.head_dim, stride, task.out);
  for (int g = 0; g < group; ++g) {
    const float inv = 1.0f / sums[g];
    float* o = task.out + g * s.head_dim;
    for (int64_t d = 0; d < s.head_dim; ++d) o[d] *= inv;
  }
}

}  // namespace attention_math
}  // namespace clika_kernels

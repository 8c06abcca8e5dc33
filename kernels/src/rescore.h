// HeadRescore's computation: an output head's approximate logits with each row's best
// recomputed in fp32 from the head's 8-bit rows (the form GatherBlockQuantized reads):
//   out = approx; per token t, for the top_k largest approx[t, i] (ties: lower i first, a
//   NaN ranks lowest), out[t, i] = sum over blocks b of
//   ((code[i, b, j] - zero[i, b]) * scale[i, b]) * x[t, b * block + j]
// (zero 128 where the head has no zero points), summed in a fixed order, the same on every
// ISA and for a token alone or in any batch.
#pragma once

#include <cstdint>
#include <string>

#include "kernel_api.h"
#include "matmul.h"

namespace clika_kernels {

struct RescoreProblem {
  int64_t tokens, n, k;        // approx [tokens, n], x [tokens, k]
  int64_t blocks, block;       // k = blocks * block; block a multiple of 16
  int64_t top_k;               // logits recomputed per token (at most n are)
  const float* approx;         // [tokens, n]
  const float* x;              // [tokens, k]
  const uint8_t* codes;        // [n, blocks, block]
  const float* scales;         // [n, blocks]
  const uint8_t* zero_points;  // [n, blocks], or null: 128
  float* out;                  // [tokens, n]
};

// The ids of the `count` best entries of row[0, n) (count <= n), in no particular order.
void select_best(const float* row, int64_t n, int64_t count, int64_t* ids);

// out[token, ids[j]] for j < count, on `isa` (every ISA gives the same bits).
void rescore_ids(const RescoreProblem& p, int64_t token, const int64_t* ids, int64_t count, Isa isa);

// "" or why the problem cannot run (nothing is written then).
std::string run_rescore(const RescoreProblem& p, Isa isa, const ParallelRunner& runner);

}  // namespace clika_kernels

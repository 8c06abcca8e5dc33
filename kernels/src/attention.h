// StepAttention's computation: a step's packed tokens attend to their rows' KV cache, the
// layout GroupQueryAttention keeps (past and present one buffer, [rows, kv_heads,
// capacity, head_dim]), with the rotary embedding applied inside. What the op reads:
//   qkv [T, (heads + 2 kv_heads) * head_dim], token t in row cell[t] = (row, column);
//   a row's first new token sits at position past = seqlens_k[row] + 1 - query_seqlens[row]
//   and token (row, c) at past + c: its K and V are written there, and it sees keys
//   (position - window, position] (window 0: every key from 0).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "kernel_api.h"
#include "matmul.h"

namespace clika_kernels {

struct AttentionShape {
  int64_t num_heads, kv_heads, head_dim;
  int64_t rotary_half;  // rotated pairs per head (cos/sin columns); 0 with no rotary
  float scale;          // applied to q . k
  float softcap;        // 0: none; else scores become softcap * tanh(score / softcap)
  int64_t window;       // keys a query sees, itself included; 0: all before it
};

struct AttentionProblem {
  AttentionShape shape;
  int64_t tokens, rows, capacity;
  const float* qkv;            // [tokens, (heads + 2 kv_heads) * head_dim]
  const int64_t* cells;        // [tokens, 2] (row, column)
  const int32_t* seqlens_k;    // [rows]
  const int32_t* query_seqlens;  // [rows]
  const float* cos;            // [positions, rotary_half], null with no rotary
  const float* sin;
  int64_t positions;           // rows of cos / sin
  float* key_cache;            // [rows, kv_heads, capacity, head_dim], written in place
  float* value_cache;
  float* out;                  // [tokens, heads * head_dim]
};

// One task of the computation: a token's query heads that share one KV head.
struct AttentionTask {
  const float* query;   // the group's first head, before rotary
  const float* cos;     // at the token's position; null with no rotary
  const float* sin;
  const float* keys;    // the KV head's cache rows from position 0
  const float* values;
  int64_t first, last;  // the visible keys
  float* out;           // the group's first output head
};

// The scale applied to q . k: the given one, or 1/sqrt(head_dim) where it is 0.
inline float attention_scale(float given, int64_t head_dim) {
  return given != 0.0f ? given : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

// Floats of scratch `attend_task` needs for a task whose last visible key is `last`.
int64_t attention_scratch_floats(const AttentionShape& s, int64_t last);

// The group's outputs for one task, on `isa` (every ISA gives the same bits).
void attend_task(const AttentionTask& task, const AttentionShape& s, float* scratch, Isa isa);

// "" or why the problem cannot run (nothing is written then): cells out of range, a row's
// positions beyond its capacity or the rotary table.
std::string run_attention(const AttentionProblem& p, Isa isa, const ParallelRunner& runner);

}  // namespace clika_kernels

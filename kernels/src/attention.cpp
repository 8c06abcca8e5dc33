#include "attention.h"

#include <algorithm>
#include <vector>

#include "attention_math.h"

namespace clika_kernels {
namespace {

struct TokenPlace {
  int64_t row, position;
};

// Where each packed token sits, or why a token cannot be placed.
std::string place_tokens(const AttentionProblem& p, std::vector<TokenPlace>* places) {
  places->resize(p.tokens);
  for (int64_t t = 0; t < p.tokens; ++t) {
    const int64_t row = p.cells[2 * t], column = p.cells[2 * t + 1];
    if (row < 0 || row >= p.rows) {
      return "token " + std::to_string(t) + " is in row " + std::to_string(row) + " of " + std::to_string(p.rows);
    }
    const int64_t queries = p.query_seqlens[row];
    if (column < 0 || column >= queries) {
      return "token " + std::to_string(t) + " is column " + std::to_string(column) + " of row " +
             std::to_string(row) + ", which has query_seqlens " + std::to_string(queries);
    }
    const int64_t past = static_cast<int64_t>(p.seqlens_k[row]) + 1 - queries;
    const int64_t position = past + column;
    if (past < 0 || position >= p.capacity) {
      return "row " + std::to_string(row) + ": position " + std::to_string(position) +
             " is outside the cache's capacity " + std::to_string(p.capacity);
    }
    if (p.cos != nullptr && position >= p.positions) {
      return "row " + std::to_string(row) + ": position " + std::to_string(position) +
             " is beyond the rotary table's " + std::to_string(p.positions) + " positions";
    }
    (*places)[t] = TokenPlace{row, position};
  }
  return "";
}

float* head_rows(float* cache, const AttentionProblem& p, int64_t row, int64_t head) {
  return cache + (row * p.shape.kv_heads + head) * p.capacity * p.shape.head_dim;
}

// Every new token's K (rotated) and V into its cache slot, before any token reads them.
void write_new_keys(const AttentionProblem& p, const std::vector<TokenPlace>& places) {
  const AttentionShape& s = p.shape;
  const int64_t width = (s.num_heads + 2 * s.kv_heads) * s.head_dim;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const float* key = p.qkv + t * width + s.num_heads * s.head_dim;
    const float* value = key + s.kv_heads * s.head_dim;
    const TokenPlace& at = places[t];
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      const int64_t offset = at.position * s.head_dim;
      float* k_slot = head_rows(p.key_cache, p, at.row, h) + offset;
      float* v_slot = head_rows(p.value_cache, p, at.row, h) + offset;
      if (p.cos != nullptr) {
        const float* cos = p.cos + at.position * s.rotary_half;
        const float* sin = p.sin + at.position * s.rotary_half;
        attention_math::rotate_half(key + h * s.head_dim, cos, sin, s.rotary_half, s.head_dim, k_slot);
      } else {
        std::copy(key + h * s.head_dim, key + (h + 1) * s.head_dim, k_slot);
      }
      std::copy(value + h * s.head_dim, value + (h + 1) * s.head_dim, v_slot);
    }
  }
}

struct Job {
  const AttentionProblem* p;
  const std::vector<TokenPlace>* places;
  Isa isa;
};

float* thread_scratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < floats) scratch.resize(floats);
  return scratch.data();
}

void run_task(void* data, size_t index) {
  const Job& job = *static_cast<const Job*>(data);
  const AttentionProblem& p = *job.p;
  const AttentionShape& s = p.shape;
  const int64_t t = static_cast<int64_t>(index) / s.kv_heads, h = static_cast<int64_t>(index) % s.kv_heads;
  const TokenPlace& at = (*job.places)[t];
  const int64_t group = s.num_heads / s.kv_heads;
  const int64_t width = (s.num_heads + 2 * s.kv_heads) * s.head_dim;
  AttentionTask task;
  task.query = p.qkv + t * width + h * group * s.head_dim;
  task.cos = p.cos != nullptr ? p.cos + at.position * s.rotary_half : nullptr;
  task.sin = p.sin != nullptr ? p.sin + at.position * s.rotary_half : nullptr;
  task.keys = head_rows(p.key_cache, p, at.row, h);
  task.values = head_rows(p.value_cache, p, at.row, h);
  task.first = s.window > 0 ? std::max<int64_t>(0, at.position - s.window + 1) : 0;
  task.last = at.position;
  task.out = p.out + t * s.num_heads * s.head_dim + h * group * s.head_dim;
  attend_task(task, s, thread_scratch(attention_scratch_floats(s, task.last)), job.isa);
}

}  // namespace

std::string run_attention(const AttentionProblem& p, Isa isa, const ParallelRunner& runner) {
  std::vector<TokenPlace> places;
  std::string error = place_tokens(p, &places);
  if (!error.empty()) return error;
  write_new_keys(p, places);
  Job job{&p, &places, isa};
  if (p.tokens > 0 && !runner.run(runner.context, run_task, p.tokens * p.shape.kv_heads, &job)) {
    return "the thread pool could not run the tasks";
  }
  return "";
}

}  // namespace clika_kernels

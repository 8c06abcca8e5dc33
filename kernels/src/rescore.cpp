#include "rescore.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "rescore_math.h"

namespace clika_kernels {

#if defined(__x86_64__)
void rescore_ids_avx2(const RescoreProblem& p, int64_t token, const int64_t* ids, int64_t count);    // rescore_avx2.cpp
void rescore_ids_avx512(const RescoreProblem& p, int64_t token, const int64_t* ids, int64_t count);  // rescore_avx512.cpp
#endif

namespace {

// A NaN ranks below every number, so the order is total and the selection well defined.
inline float rank(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

// Spans of the row whose maxima bound the k-th best from below: the k-th largest span
// maximum t has k spans holding a value >= t, so every one of the k best is >= t and lies
// in a span whose maximum is >= t. Only those spans are read twice.
constexpr int64_t kSpan = 64;

// The largest rank of x[0, count): 16 lane maxima, so it vectorizes. A NaN fails every
// comparison and so is never taken: it ranks lowest, as rank() has it.
inline float span_max(const float* x, int64_t count) {
  constexpr int kLanes = 16;
  float lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  }
  for (int l = 0; i + l < count; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  float peak = lanes[0];
  for (int l = 1; l < kLanes; ++l) peak = lanes[l] > peak ? lanes[l] : peak;
  return peak;
}

struct SelectScratch {
  std::vector<float> maxima, sorted;
  std::vector<int64_t> candidates;
};

thread_local SelectScratch tls_select;

// Candidates >= the k-th largest span maximum (all of the row when it has few spans).
void candidates_of(const float* row, int64_t n, int64_t count, SelectScratch& s) {
  s.candidates.clear();
  const int64_t spans = (n + kSpan - 1) / kSpan;
  if (spans <= count) {
    for (int64_t i = 0; i < n; ++i) s.candidates.push_back(i);
    return;
  }
  s.maxima.resize(static_cast<size_t>(spans));
  for (int64_t j = 0; j < spans; ++j) s.maxima[static_cast<size_t>(j)] = span_max(row + j * kSpan, std::min(kSpan, n - j * kSpan));
  s.sorted = s.maxima;
  std::nth_element(s.sorted.begin(), s.sorted.begin() + (count - 1), s.sorted.end(), std::greater<float>());
  const float bound = s.sorted[static_cast<size_t>(count - 1)];
  for (int64_t j = 0; j < spans; ++j) {
    if (s.maxima[static_cast<size_t>(j)] < bound) continue;
    for (int64_t i = j * kSpan; i < std::min(n, (j + 1) * kSpan); ++i) {
      if (rank(row[i]) >= bound) s.candidates.push_back(i);
    }
  }
}

struct RescoreTasks {
  const RescoreProblem* p;
  Isa isa;
  int64_t best;          // ids a token keeps: min(top_k, n)
  int64_t chunk;         // ids a dot task takes
  int64_t chunks;        // dot tasks per token
  std::vector<int64_t> ids;  // [tokens, best]
};

void run_select(void* data, size_t t) {
  RescoreTasks& r = *static_cast<RescoreTasks*>(data);
  const RescoreProblem& p = *r.p;
  const int64_t token = static_cast<int64_t>(t);
  std::copy(p.approx + token * p.n, p.approx + (token + 1) * p.n, p.out + token * p.n);
  select_best(p.approx + token * p.n, p.n, r.best, r.ids.data() + token * r.best);
}

void run_dots(void* data, size_t i) {
  const RescoreTasks& r = *static_cast<const RescoreTasks*>(data);
  const int64_t token = static_cast<int64_t>(i) / r.chunks;
  const int64_t first = static_cast<int64_t>(i) % r.chunks * r.chunk;
  const int64_t count = std::min(r.chunk, r.best - first);
  rescore_ids(*r.p, token, r.ids.data() + token * r.best + first, count, r.isa);
}

}  // namespace

void select_best(const float* row, int64_t n, int64_t count, int64_t* ids) {
  SelectScratch& s = tls_select;
  candidates_of(row, n, count, s);
  auto better = [row](int64_t a, int64_t b) {
    const float va = rank(row[a]), vb = rank(row[b]);
    return va > vb || (va == vb && a < b);
  };
  if (static_cast<int64_t>(s.candidates.size()) > count) {
    std::nth_element(s.candidates.begin(), s.candidates.begin() + count, s.candidates.end(), better);
  }
  std::copy(s.candidates.begin(), s.candidates.begin() + count, ids);
}

void rescore_ids(const RescoreProblem& p, int64_t token, const int64_t* ids, int64_t count, Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kAvx2: return rescore_ids_avx2(p, token, ids, count);
    case Isa::kAvx512:
    case Isa::kAvx512Vnni:
    case Isa::kAvx512Bf16: return rescore_ids_avx512(p, token, ids, count);
    default: break;
  }
#else
  (void)isa;  // aarch64's baseline is NEON
#endif
  rescore_math::rescore<rescore_math::PortableDot>(p, token, ids, count);
}

std::string run_rescore(const RescoreProblem& p, Isa isa, const ParallelRunner& runner) {
  if (p.top_k < 1) return "top_k=" + std::to_string(p.top_k) + " must be at least 1";
  if (p.block <= 0 || p.block % rescore_math::kLanes != 0 || p.blocks * p.block != p.k) {
    return "the head's blocks (" + std::to_string(p.blocks) + " of " + std::to_string(p.block) +
           ") must cover K=" + std::to_string(p.k) + " in blocks of a multiple of 16";
  }
  if (p.tokens == 0 || p.n == 0) return "";
  // ~64 ids a task: enough work to pay for the hand-off, and parts for both threads of one token.
  constexpr int64_t kIdsPerTask = 64;
  RescoreTasks r{&p, isa, std::min(p.top_k, p.n), 0, 0, {}};
  r.chunk = std::min(kIdsPerTask, r.best);
  r.chunks = (r.best + r.chunk - 1) / r.chunk;
  r.ids.resize(static_cast<size_t>(p.tokens * r.best));
  if (!runner.run(runner.context, run_select, static_cast<size_t>(p.tokens), &r)) {
    return "the thread pool failed to run the selection";
  }
  if (!runner.run(runner.context, run_dots, static_cast<size_t>(p.tokens * r.chunks), &r)) {
    return "the thread pool failed to run the re-score";
  }
  return "";
}

}  // namespace clika_kernels

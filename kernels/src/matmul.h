// Y = A @ dequant(B)^T over GGUF blocks: checks, activation preparation, and the split of
// the output features into tasks for a parallel-for the caller supplies (ORT's pool, or
// a plain loop in the standalone harness).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "epilogue.h"
#include "kernel_api.h"

namespace clika_kernels {

struct ParallelRunner {
  void* context = nullptr;
  // Calls fn(data, i) for every i < total, in any order and on any threads; false on failure.
  bool (*run)(void* context, void (*fn)(void*, size_t), size_t total, void* data) = nullptr;
};

// A plain loop on the calling thread.
ParallelRunner serial_runner();

// Bytes of one stored row of k weights, or -1 (with *error set) when type or k is invalid.
int64_t stored_row_bytes(int type, int64_t k, std::string* error);

// "" when `epilogue` can apply to a matrix of n rows, else why not (kSwiglu: n must be even).
std::string epilogue_error(Epilogue epilogue, int64_t n);

// Computes p.y; returns "" or the reason it could not (nothing is written then).
// kSwiglu: p.n counts W's rows (gate, then up) and p.y holds [m, n / 2] outputs.
std::string run_matmul(const Problem& p, Precision precision, Isa isa, const ParallelRunner& runner,
                       Epilogue epilogue = Epilogue::kNone);

}  // namespace clika_kernels

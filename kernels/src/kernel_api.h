// The contract between the driver (matmul.cpp) and the per-ISA engines.
//
// The driver prepares the activations once per call, splits the output features into
// ranges and hands each range to one engine function together with per-thread scratch.
// An engine computes Y[m, n] for every row m and every n of its range, with the same
// sequence of operations for each (m, n) whatever M is, so a row's result does not
// depend on the rows computed beside it.
#pragma once

#include <cstdint>

namespace clika_kernels {

enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Vnni, kAvx512Bf16, kNeon, kNeonDotprod };
// kFp32Split16: fp32 activations that the AVX-512 VNNI path computes for Q4_0 / Q4_1 as 16-bit
// integers in exact integer dots (avx512_split16.cpp), every other path as kFp32.
enum class Precision { kFp32, kInt8, kFp32Split16 };

struct Problem {
  int type;           // GGML type id
  int64_t m, n, k;    // Y[m, n] = A[m, k] @ W[n, k]^T
  int64_t row_bytes;  // bytes of one stored row of W
  const float* a;     // [m, k]
  const uint8_t* b;   // [n, row_bytes] GGUF blocks as stored
  float* y;           // [m, n]
};

// Activations as every engine reads them, prepared once per call (rows are independent).
struct Activations {
  const float* a;         // [m, k] fp32 (fp32 FMA engines)
  const float* xsum;      // [m, k/G] sum of a per G weights, G = avx2_fp32_sum_group(type)
  const int8_t* qa;       // [m, k] int8 per 32-block    (int8 engines)
  const float* lane_da;   // [m, k/4] the int8 scale of each 4-byte lane (int8 engines)
  const float* group_da;  // [m, k/16] the int8 scale of each 16-group (int8 engines)
  const float* sum16;     // [m, k/16] da * sum of qa per 16 weights (int8 engines)
  const float* sum32;     // [m, k/32] da * sum of qa per 32 weights
  // The same int8 activations as the unit engines read them (avx512_units.h): per tile
  // of 8 rows (the last tile holds the rows left), per unit of 256 weights, per row, one
  // record of kUnitRecordBytes. A tile's units lie only its own rows' records apart: at a
  // fixed stride of 8 records a one-row walk over a long row (K = 8960: 35 units) maps
  // onto a quarter of L1's sets and misses there, at 2.4x the time per unit.
  int64_t units;                 // units per row: ceil(k / 256)
  int64_t m;                     // rows
  const uint8_t* unit_records;   // tile t at t * units * 8 records: [units, rows of t, kUnitRecordBytes]
  // The fp32 activations split into bf16 halves in a stored row's code order, for the
  // AVX-512 BF16 engine (avx512_bf16.cpp): bf16_row_bytes per row, 64-byte aligned; null
  // where that engine does not run.
  const uint8_t* bf16_records;
  int64_t bf16_row_bytes;
  // The fp32 activations as 16-bit integers per 32 weights, split into int8 halves, for the
  // AVX-512 VNNI split engine (avx512_split16.cpp): split16_row_bytes per row, 64-byte
  // aligned; null where that engine does not run.
  const uint8_t* split16_records;
  int64_t split16_row_bytes;
};

// One thread's buffers for the weight row being computed (k elements unless stated).
struct RowScratch {
  uint8_t* codes;
  float* scale16;     // k/16
  float* bias16;      // k/16
  float* wf;          // fp32 weights
  uint8_t* units;        // kUnitScratchBytes per 256-weight unit of each row of a task
  uint8_t* tile_states;  // kTileStateBytes per row of a task
  float* panel;          // k fp32 weights per row of a task (the AVX-512 fp32 engine's prefill)
};

// Scratch of the unit engines (avx512_units.h), 64-byte aligned: one decoded 256-weight
// unit, and one output's accumulators for a tile of activation rows.
constexpr int64_t kUnitScratchBytes = 384;
constexpr int64_t kTileStateBytes = 1024;

// One row's activations for one unit, as the unit engines read them: the 256 int8 values
// in lane order, each lane's activation scale (16 floats), then for formats with a bias
// of their own the 16 group sums (da * sum of q, floats, group order), for symmetric ones
// each lane's integer sum times -zero (16 int32, lane order), the dot products' start.
constexpr int64_t kUnitRecordBytes = 384;
constexpr int kRecordRows = 8;

// The rows of the record tile that starts at row m0 of m.
inline int64_t record_tile_rows(int64_t m, int64_t m0) { return m - m0 < kRecordRows ? m - m0 : kRecordRows; }

using RangeKernel = void (*)(const Problem&, const Activations&, const RowScratch&, int64_t n0, int64_t n1);

// Engines, one per (ISA, precision); defined in their ISA's source file. Those of another
// architecture are absent from a build and never named by the driver there.
void scalar_fp32_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
void scalar_int8_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
#if defined(__x86_64__)
void avx2_fp32_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
// The group whose activation sums the AVX2 fp32 engine adds its biases against (16 or 32), or
// 0 for a format it computes without a bias term.
int avx2_fp32_sum_group(int type);
void avx2_int8_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
void avx512_fp32_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
void avx512_int8_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
void avx512_vnni_int8_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
// Q4_0 and Q4_1 through the 16-bit split on VNNI; other formats through avx512_fp32_range.
void avx512_vnni_fp32_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
// Q4_0 and Q4_1 through the BF16 split; other formats through avx512_fp32_range.
void avx512_bf16_fp32_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
#endif
#if defined(__aarch64__)
void neon_fp32_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
void neon_int8_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
void neon_dotprod_int8_range(const Problem&, const Activations&, const RowScratch&, int64_t, int64_t);
#endif

}  // namespace clika_kernels

#include "matmul.h"

#include <algorithm>
#include <vector>

#include "activations.h"
#include "epilogue.h"
#include "formats.h"
#include "isa.h"

namespace clika_kernels {
namespace {

template <class T>
T* aligned64(std::vector<T>& items) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(items.data());
  return items.data() + (64 - at % 64) % 64 / sizeof(T);
}

// One thread's buffers, grown to the largest task it has seen (k weights, `rows` rows).
struct ScratchBuffers {
  std::vector<uint8_t> codes;
  std::vector<float> scale16, bias16, wf;
  std::vector<uint8_t> units, tile_states;
  std::vector<float> panel;

  RowScratch view(int64_t k, int64_t rows) {
    if (static_cast<int64_t>(codes.size()) < k) {
      codes.resize(k);
      wf.resize(k);
      scale16.resize(k / 16);
      bias16.resize(k / 16);
    }
    const size_t unit_bytes = static_cast<size_t>(rows * ((k + 255) / 256) * kUnitScratchBytes + 64);
    if (units.size() < unit_bytes) units.resize(unit_bytes);
    const size_t state_bytes = static_cast<size_t>(rows * kTileStateBytes + 64);
    if (tile_states.size() < state_bytes) tile_states.resize(state_bytes);
    if (panel.size() < static_cast<size_t>(rows * k + 16)) panel.resize(static_cast<size_t>(rows * k + 16));
    return RowScratch{codes.data(), scale16.data(),    bias16.data(), wf.data(),
                      aligned64(units), aligned64(tile_states), aligned64(panel)};
  }
};

thread_local ScratchBuffers tls_scratch;

// Tasks of about 32 KiB of stored weights: enough work to hide the pool's hand-off, and
// enough tasks (hundreds per matrix) to balance two threads.
// The split engine computes 16 outputs at a time, so its tasks are whole tiles of 16, and
// about twice as large: a task's first tile starts cold, the others are prefetched.
int64_t rows_per_task(const Problem& p, ActivationForm form) {
  const int64_t bytes = form == ActivationForm::kSplit16 ? 64 * 1024 : 32 * 1024;
  const int64_t rows = std::max<int64_t>(1, bytes / std::max<int64_t>(1, p.row_bytes));
  return form == ActivationForm::kSplit16 ? (rows + 15) / 16 * 16 : rows;
}

struct MatmulTask {
  const Problem* p;
  const Activations* x;
  RangeKernel kernel;
  int64_t rows;
};

void run_task(void* data, size_t i) {
  const MatmulTask& t = *static_cast<const MatmulTask*>(data);
  const int64_t n0 = static_cast<int64_t>(i) * t.rows;
  const int64_t n1 = std::min(t.p->n, n0 + t.rows);
  t.kernel(*t.p, *t.x, tls_scratch.view(t.p->k, t.rows), n0, n1);
}

// The activation over the products of a gated call, rows [r0, r1) a task: after the
// matmul, whose tasks then stream the gate and up rows as one matrix (tasks of a gate range
// and its up range made SmolLM2's gate_up slower: 2.60 against 2.43 ms a step, profiled).
struct SwigluTask {
  const float* full;
  int64_t n, half;
  float* y;
  Isa isa;
  int64_t rows_per_task, m;
};

void run_swiglu_task(void* data, size_t i) {
  const SwigluTask& t = *static_cast<const SwigluTask*>(data);
  const int64_t r0 = static_cast<int64_t>(i) * t.rows_per_task;
  const int64_t r1 = std::min(t.m, r0 + t.rows_per_task);
  swiglu_rows(t.full + r0 * t.n, t.n, t.half, t.y + r0 * t.half, r1 - r0, t.isa);
}

// Below this many outputs the activation runs on the calling thread (a one-row decode step's
// 1536 take about a microsecond, less than handing them to the pool).
constexpr int64_t kSerialSwigluOutputs = 16384;

// The full products of a gated call, on the calling thread's buffer (grown, never shrunk).
thread_local std::vector<float> tls_gated_products;

struct PrepareTask {
  const float* a;
  int64_t k;
  ActivationForm form;
  PreparedActivations* out;
};

void run_prepare(void* data, size_t i) {
  const PrepareTask& t = *static_cast<const PrepareTask*>(data);
  prepare_rows(t.a, t.k, t.form, t.out, static_cast<int64_t>(i), static_cast<int64_t>(i) + 1);
}

// The weights per activation sum the AVX2 fp32 engine adds its biases against (0: none).
// Asked only when that engine runs: its code is compiled for AVX2.
int fp32_sum_group(Precision precision, Isa isa, int type) {
#if defined(__x86_64__)
  if (precision != Precision::kInt8 && isa == Isa::kAvx2) return avx2_fp32_sum_group(type);
#endif
  return 0;
}

// The AVX-512 int8 engines read the activations in unit order (avx512_units.h); the AVX2
// fp32 engine adds biases against the activations' group sums (avx2_fp32.cpp); the BF16
// engine reads them split into bf16 halves in code order (avx512_bf16.cpp).
ActivationForm form_for(Precision precision, Isa isa, int sum_group, int type) {
  if (precision != Precision::kInt8) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512Bf16 && bf16_split_format(type)) return ActivationForm::kBf16Split;
    if (precision == Precision::kFp32Split16 && isa == Isa::kAvx512Vnni && split16_format(type)) {
      return ActivationForm::kSplit16;
    }
#endif
    return sum_group > 0 ? ActivationForm::kFp32Sums : ActivationForm::kFp32;
  }
  const bool units = isa == Isa::kAvx512 || isa == Isa::kAvx512Vnni || isa == Isa::kAvx512Bf16;
  return units ? ActivationForm::kInt8Units : ActivationForm::kInt8;
}

bool serial_run(void*, void (*fn)(void*, size_t), size_t total, void* data) {
  for (size_t i = 0; i < total; ++i) fn(data, i);
  return true;
}

}  // namespace

ParallelRunner serial_runner() { return ParallelRunner{nullptr, serial_run}; }

int64_t stored_row_bytes(int type, int64_t k, std::string* error) {
  BlockLayout layout;
  if (!block_layout(type, &layout)) {
    *error = "ggml_type " + std::to_string(type) +
             " is not supported (Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8, Q4_K=12, Q5_K=13, Q6_K=14)";
    return -1;
  }
  if (k <= 0 || k % layout.weights != 0) {
    *error = "K=" + std::to_string(k) + " must be a positive multiple of the block (" +
             std::to_string(layout.weights) + " weights) for ggml_type " + std::to_string(type);
    return -1;
  }
  return k / layout.weights * layout.bytes;
}

std::string epilogue_error(Epilogue epilogue, int64_t n) {
  if (epilogue == Epilogue::kSwiglu && n % 2 != 0) {
    return "N=" + std::to_string(n) + " must be even for activation swiglu (gate rows, then up rows)";
  }
  return "";
}

std::string run_matmul(const Problem& p, Precision precision, Isa isa, const ParallelRunner& runner,
                       Epilogue epilogue) {
  std::string error = epilogue_error(epilogue, p.n);
  if (!error.empty()) return error;
  const int64_t row_bytes = stored_row_bytes(p.type, p.k, &error);
  if (row_bytes < 0) return error;
  if (row_bytes != p.row_bytes) {
    return "B has " + std::to_string(p.row_bytes) + " bytes per row; K=" + std::to_string(p.k) + " needs " +
           std::to_string(row_bytes);
  }
  const RangeKernel kernel = find_kernel(isa, precision);
  if (kernel == nullptr) return std::string("no kernel for ISA ") + isa_name(isa) + " in this build";
  if (p.m == 0 || p.n == 0) return "";

  PreparedActivations acts;
  acts.sum_group = fp32_sum_group(precision, isa, p.type);
  const ActivationForm form = form_for(precision, isa, acts.sum_group, p.type);
  acts.zero = symmetric_zero(p.type);
  acts.type = p.type;
  allocate_activations(p.a, p.m, p.k, form, &acts);
  if (form != ActivationForm::kFp32) {
    PrepareTask prepare{p.a, p.k, form, &acts};
    if (!runner.run(runner.context, run_prepare, static_cast<size_t>(p.m), &prepare)) {
      return "the thread pool failed to run the activation preparation";
    }
  }
  Problem full = p;
  if (epilogue == Epilogue::kSwiglu) {
    tls_gated_products.resize(static_cast<size_t>(p.m * p.n));
    full.y = tls_gated_products.data();
  }
  MatmulTask task{&full, &acts.view, kernel, rows_per_task(p, form)};
  const size_t tasks = static_cast<size_t>((p.n + task.rows - 1) / task.rows);
  if (!runner.run(runner.context, run_task, tasks, &task)) return "the thread pool failed to run the matmul";
  if (epilogue != Epilogue::kSwiglu) return "";
  const int64_t half = p.n / 2;
  if (p.m * half <= kSerialSwigluOutputs) {
    swiglu_rows(full.y, p.n, half, p.y, p.m, isa);
    return "";
  }
  const int64_t rows = std::max<int64_t>(1, kSerialSwigluOutputs / half);
  SwigluTask activate{full.y, p.n, half, p.y, isa, rows, p.m};
  const size_t activate_tasks = static_cast<size_t>((p.m + rows - 1) / rows);
  if (!runner.run(runner.context, run_swiglu_task, activate_tasks, &activate)) {
    return "the thread pool failed to run the activation";
  }
  return "";
}

}  // namespace clika_kernels

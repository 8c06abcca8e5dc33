// attend_task: the ISA's build of the one arithmetic in attention_math.h (the portable
// loops here, AVX2 and AVX-512 their own inner loops in attention_avx2/avx512.cpp).
#include "attention.h"
#include "attention_math.h"

namespace clika_kernels {

#if defined(__x86_64__)
void attend_avx2(const AttentionTask& task, const AttentionShape& s, float* scratch);    // attention_avx2.cpp
void attend_avx512(const AttentionTask& task, const AttentionShape& s, float* scratch);  // attention_avx512.cpp
#endif

namespace {

void attend_baseline(const AttentionTask& task, const AttentionShape& s, float* scratch) {
  attention_math::attend<attention_math::PortableLoops>(task, s, scratch);
}

}  // namespace

int64_t attention_scratch_floats(const AttentionShape& s, int64_t last) {
  const int64_t group = s.num_heads / s.kv_heads;
  return group * s.head_dim + attention_math::kLanes + group * (last + 1);
}

void attend_task(const AttentionTask& task, const AttentionShape& s, float* scratch, Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kAvx2: return attend_avx2(task, s, scratch);
    case Isa::kAvx512:
    case Isa::kAvx512Vnni:
    case Isa::kAvx512Bf16: return attend_avx512(task, s, scratch);
    default: return attend_baseline(task, s, scratch);
  }
#else
  (void)isa;
  attend_baseline(task, s, scratch);  // aarch64's baseline is NEON
#endif
}

}  // namespace clika_kernels

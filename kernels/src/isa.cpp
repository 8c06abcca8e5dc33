#include "isa.h"

#include <cstdlib>
#include <cstring>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace clika_kernels {
namespace {

const Isa kAllIsas[] = {Isa::kScalar,     Isa::kAvx2, Isa::kAvx512,     Isa::kAvx512Vnni,
                        Isa::kAvx512Bf16, Isa::kNeon, Isa::kNeonDotprod};

#if defined(__x86_64__)
bool has_avx512_base() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

#if defined(__aarch64__)
bool has_dotprod() {
#if defined(__linux__)
  return (getauxval(AT_HWCAP) & (1ul << 20)) != 0;  // HWCAP_ASIMDDP
#else
  return false;
#endif
}
#endif

// The best ISA first.
// The BF16 split (avx512_bf16) runs only when forced: its decode matrices are 1.3-1.4x faster
// on one thread, but a SmolLM2-135M decode step moved within the noise, its prefill ran
// 1.4-1.6x slower and its error is 2.5e-6 against 1.4e-7 (kernels/README.md).
const Isa kPreference[] = {Isa::kAvx512Vnni, Isa::kAvx512, Isa::kAvx2, Isa::kNeonDotprod, Isa::kNeon, Isa::kScalar};

IsaChoice choose() {
  IsaChoice choice;
  const char* forced = std::getenv("CLIKA_KERNEL_ISA");
  if (forced != nullptr && *forced != '\0' && std::strcmp(forced, "auto") != 0) {
    for (Isa isa : kAllIsas) {
      if (std::strcmp(forced, isa_name(isa)) != 0) continue;
      if (!isa_supported(isa)) {
        choice.message = std::string("CLIKA_KERNEL_ISA=") + forced + " is not supported by this CPU or build";
        return choice;
      }
      choice.ok = true;
      choice.isa = isa;
      choice.message = std::string("forced by CLIKA_KERNEL_ISA=") + forced;
      return choice;
    }
    choice.message = std::string("CLIKA_KERNEL_ISA=") + forced +
                     " is not one of scalar, avx2, avx512, avx512_vnni, avx512_bf16, neon, neon_dotprod, auto";
    return choice;
  }
  for (Isa isa : kPreference) {
    if (!isa_supported(isa)) continue;
    choice.ok = true;
    choice.isa = isa;
    choice.message = std::string("the best this CPU supports (") + isa_name(isa) + ")";
    return choice;
  }
  return choice;  // unreachable: scalar is always supported
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512_vnni";
    case Isa::kAvx512Bf16: return "avx512_bf16";
    case Isa::kNeon: return "neon";
    case Isa::kNeonDotprod: return "neon_dotprod";
  }
  return "unknown";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
#if defined(__x86_64__)
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512: return has_avx512_base();
    case Isa::kAvx512Vnni: return has_avx512_base() && __builtin_cpu_supports("avx512vnni");
    // BF16 for the fp32 path, VNNI for the int8 one.
    case Isa::kAvx512Bf16: return isa_supported(Isa::kAvx512Vnni) && __builtin_cpu_supports("avx512bf16");
#endif
#if defined(__aarch64__)
    case Isa::kNeon: return true;
    case Isa::kNeonDotprod: return has_dotprod();
#endif
    default: return false;
  }
}

const IsaChoice& selected_isa() {
  static const IsaChoice choice = choose();
  return choice;
}

RangeKernel find_kernel(Isa isa, Precision precision) {
  const bool fp32 = precision != Precision::kInt8;
#if defined(__x86_64__)
  if (isa == Isa::kAvx512Vnni && precision == Precision::kFp32Split16) return avx512_vnni_fp32_range;
#endif
  switch (isa) {
    case Isa::kScalar: return fp32 ? scalar_fp32_range : scalar_int8_range;
#if defined(__x86_64__)
    case Isa::kAvx2: return fp32 ? avx2_fp32_range : avx2_int8_range;
    case Isa::kAvx512: return fp32 ? avx512_fp32_range : avx512_int8_range;
    case Isa::kAvx512Vnni: return fp32 ? avx512_fp32_range : avx512_vnni_int8_range;
    case Isa::kAvx512Bf16: return fp32 ? avx512_bf16_fp32_range : avx512_vnni_int8_range;
#endif
#if defined(__aarch64__)
    case Isa::kNeon: return fp32 ? neon_fp32_range : neon_int8_range;
    case Isa::kNeonDotprod: return fp32 ? neon_fp32_range : neon_dotprod_int8_range;
#endif
    default: return nullptr;
  }
}

const char* kernel_description(Isa isa, Precision precision) {
  if (isa == Isa::kAvx512Vnni && precision == Precision::kFp32Split16) {
    return "AVX-512 VNNI 16-bit split (q = 256 hi + lo, vpdpbusd) for Q4_0/Q4_1, fp32 FMA for the rest";
  }
  if (precision == Precision::kFp32Split16) return kernel_description(isa, Precision::kFp32);
  const bool fp32 = precision == Precision::kFp32;
  switch (isa) {
    case Isa::kScalar: return fp32 ? "scalar fp32" : "scalar int8";
    case Isa::kAvx2: return fp32 ? "AVX2 fp32 FMA, blocks read in place" : "AVX2 int8 (vpmaddubsw), blocks read in place";
    case Isa::kAvx512: return fp32 ? "AVX-512 fp32 FMA, weights in registers" : "AVX-512 int8 (vpmaddubsw)";
    case Isa::kAvx512Vnni:
      return fp32 ? "AVX-512 fp32 FMA, weights in registers" : "AVX-512 int8 (VNNI vpdpbusd), weights in registers";
    case Isa::kAvx512Bf16:
      return fp32 ? "AVX-512 BF16 split (x = hi + lo, vdpbf16ps) for Q4_0/Q4_1, fp32 FMA for the rest"
                  : kernel_description(Isa::kAvx512Vnni, precision);
#if defined(__aarch64__)
    case Isa::kNeon: return fp32 ? "NEON fp32 FMA" : "NEON int8 (widening multiply)";
    case Isa::kNeonDotprod: return fp32 ? "NEON fp32 FMA" : "NEON int8 (sdot)";
#endif
    default: return "none";
  }
}

}  // namespace clika_kernels

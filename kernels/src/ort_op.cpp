// The library's entry points: RegisterCustomOps adds the ai.clika ops (GgufMatMul,
// StepAttention, HeadRescore) to session options, on ORT's C API alone (the API table
// arrives here, so the library links nothing from ORT); clika_kernels_* report the ISA.
#include <onnxruntime_c_api.h>

#include "isa.h"
#include "ort_support.h"

#define CLIKA_EXPORT extern "C" __attribute__((visibility("default")))

namespace clika_kernels {
namespace {

// The oldest API with KernelContext_ParallelFor (ORT 1.17).
constexpr uint32_t kMinApiVersion = 17;

}  // namespace
}  // namespace clika_kernels

using clika_kernels::g_api;

// Registers the ai.clika ops on the session options (SessionOptions.register_custom_ops_library).
CLIKA_EXPORT OrtStatus* RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  for (uint32_t v = ORT_API_VERSION; v >= clika_kernels::kMinApiVersion && g_api == nullptr; --v) {
    g_api = api_base->GetApi(v);
  }
  if (g_api == nullptr) return nullptr;  // no API table to report with; ORT is older than 1.17
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* s = g_api->CreateCustomOpDomain("ai.clika", &domain)) return s;
  // The domain must outlive every session made from these options, so it is never released.
  if (OrtStatus* s = g_api->CustomOpDomain_Add(domain, clika_kernels::gguf_matmul_op())) return s;
  if (OrtStatus* s = g_api->CustomOpDomain_Add(domain, clika_kernels::step_attention_op())) return s;
  if (OrtStatus* s = g_api->CustomOpDomain_Add(domain, clika_kernels::head_rescore_op())) return s;
  return g_api->AddCustomOpDomain(options, domain);
}

// What the library will run with, for the runtime's status line (ctypes).
CLIKA_EXPORT const char* clika_kernels_isa() {
  const clika_kernels::IsaChoice& c = clika_kernels::selected_isa();
  return c.ok ? clika_kernels::isa_name(c.isa) : "";
}

CLIKA_EXPORT const char* clika_kernels_isa_reason() { return clika_kernels::selected_isa().message.c_str(); }

// precision: 0 fp32, 1 int8, 2 fp32 with fp32_form "split16".
CLIKA_EXPORT const char* clika_kernels_engine(int precision) {
  const clika_kernels::IsaChoice& c = clika_kernels::selected_isa();
  if (!c.ok) return "";
  const clika_kernels::Precision p = precision == 1   ? clika_kernels::Precision::kInt8
                                     : precision == 2 ? clika_kernels::Precision::kFp32Split16
                                                      : clika_kernels::Precision::kFp32;
  return clika_kernels::kernel_description(c.isa, p);
}

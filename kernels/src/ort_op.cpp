// The ONNX Runtime custom op ai.clika::GgufMatMul (since version 1), on ORT's C API alone:
// the API table arrives in RegisterCustomOps, so the library links nothing from ORT.
//   inputs  A float32 [..., K], B uint8 [N, row_bytes] (GGUF blocks as stored, read in place)
//   output  Y float32 [..., N] = A @ dequant(B)^T, or with activation "swiglu"
//           [..., N/2] = silu(A @ gate^T) * (A @ up^T), gate B's first N/2 rows, up the rest
//   attributes ggml_type, K, N (int), precision "fp32" (default) | "int8",
//              activation "none" (default) | "swiglu"
#include <onnxruntime_c_api.h>

#include <climits>
#include <string>
#include <vector>

#include "isa.h"
#include "matmul.h"

#define CLIKA_EXPORT extern "C" __attribute__((visibility("default")))

namespace clika_kernels {
namespace {

// The oldest API with KernelContext_ParallelFor (ORT 1.17).
constexpr uint32_t kMinApiVersion = 17;
const OrtApi* g_api = nullptr;

struct GgufMatMulKernel {
  int type;
  int64_t k, n, row_bytes;
  Precision precision;
  Isa isa;
  Epilogue epilogue;
};

OrtStatus* invalid(const std::string& message) {
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, ("GgufMatMul: " + message).c_str());
}

OrtStatus* read_int(const OrtKernelInfo* info, const char* name, int64_t* out) {
  OrtStatus* status = g_api->KernelInfoGetAttribute_int64(info, name, out);
  if (status == nullptr) return nullptr;
  g_api->ReleaseStatus(status);
  return invalid(std::string("the int attribute '") + name + "' is missing");
}

// A missing attribute reads as the default.
std::string read_string(const OrtKernelInfo* info, const char* name, const char* fallback) {
  size_t size = 0;
  OrtStatus* status = g_api->KernelInfoGetAttribute_string(info, name, nullptr, &size);
  if (status != nullptr) {
    g_api->ReleaseStatus(status);
    return fallback;
  }
  std::vector<char> text(size + 1, '\0');
  status = g_api->KernelInfoGetAttribute_string(info, name, text.data(), &size);
  if (status != nullptr) {
    g_api->ReleaseStatus(status);
    return fallback;
  }
  return std::string(text.data());
}

OrtStatus* create_kernel(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo* info, void** kernel) {
  int64_t type = 0, k = 0, n = 0;
  if (OrtStatus* s = read_int(info, "ggml_type", &type)) return s;
  if (OrtStatus* s = read_int(info, "K", &k)) return s;
  if (OrtStatus* s = read_int(info, "N", &n)) return s;
  std::string error;
  const int64_t row_bytes = stored_row_bytes(static_cast<int>(type), k, &error);
  if (row_bytes < 0) return invalid(error);
  if (n <= 0) return invalid("N=" + std::to_string(n) + " must be positive");
  const std::string precision = read_string(info, "precision", "fp32");
  if (precision != "fp32" && precision != "int8") {
    return invalid("precision '" + precision + "' is not one of fp32, int8");
  }
  const std::string activation = read_string(info, "activation", "none");
  if (activation != "none" && activation != "swiglu") {
    return invalid("activation '" + activation + "' is not one of none, swiglu");
  }
  const Epilogue epilogue = activation == "swiglu" ? Epilogue::kSwiglu : Epilogue::kNone;
  const std::string epilogue_problem = epilogue_error(epilogue, n);
  if (!epilogue_problem.empty()) return invalid(epilogue_problem);
  const IsaChoice& isa = selected_isa();
  if (!isa.ok) return invalid(isa.message);
  *kernel = new GgufMatMulKernel{static_cast<int>(type), k, n, row_bytes,
                                 precision == "int8" ? Precision::kInt8 : Precision::kFp32, isa.isa, epilogue};
  return nullptr;
}

struct TensorShape {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> dims;
};

OrtStatus* shape_of(const OrtValue* value, TensorShape* out) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  if (OrtStatus* s = g_api->GetTensorTypeAndShape(value, &info)) return s;
  size_t count = 0;
  OrtStatus* s = g_api->GetTensorElementType(info, &out->type);
  if (s == nullptr) s = g_api->GetDimensionsCount(info, &count);
  if (s == nullptr) {
    out->dims.resize(count);
    s = g_api->GetDimensions(info, out->dims.data(), count);
  }
  g_api->ReleaseTensorTypeAndShapeInfo(info);
  return s;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

bool ort_parallel_for(void* context, void (*fn)(void*, size_t), size_t total, void* data) {
  OrtStatus* s = g_api->KernelContext_ParallelFor(static_cast<const OrtKernelContext*>(context), fn, total, 0, data);
  if (s == nullptr) return true;
  g_api->ReleaseStatus(s);
  return false;
}

OrtStatus* compute(void* op_kernel, OrtKernelContext* context) {
  const GgufMatMulKernel& kernel = *static_cast<const GgufMatMulKernel*>(op_kernel);
  const OrtValue* a = nullptr;
  const OrtValue* b = nullptr;
  if (OrtStatus* s = g_api->KernelContext_GetInput(context, 0, &a)) return s;
  if (OrtStatus* s = g_api->KernelContext_GetInput(context, 1, &b)) return s;
  TensorShape a_shape, b_shape;
  if (OrtStatus* s = shape_of(a, &a_shape)) return s;
  if (OrtStatus* s = shape_of(b, &b_shape)) return s;
  if (a_shape.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return invalid("A must be float32");
  if (b_shape.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8) return invalid("B must be uint8");
  if (a_shape.dims.empty() || a_shape.dims.back() != kernel.k) {
    return invalid("A has shape " + dims_text(a_shape.dims) + "; its last dimension must be K=" +
                   std::to_string(kernel.k));
  }
  if (b_shape.dims.size() != 2 || b_shape.dims[0] != kernel.n || b_shape.dims[1] != kernel.row_bytes) {
    return invalid("B has shape " + dims_text(b_shape.dims) + "; expected [N, row_bytes] = [" +
                   std::to_string(kernel.n) + ", " + std::to_string(kernel.row_bytes) + "]");
  }
  int64_t m = 1;
  for (size_t i = 0; i + 1 < a_shape.dims.size(); ++i) m *= a_shape.dims[i];
  std::vector<int64_t> y_dims = a_shape.dims;
  y_dims.back() = kernel.epilogue == Epilogue::kSwiglu ? kernel.n / 2 : kernel.n;
  OrtValue* y = nullptr;
  if (OrtStatus* s = g_api->KernelContext_GetOutput(context, 0, y_dims.data(), y_dims.size(), &y)) return s;
  // API 21 has no const accessor; the inputs are only read (B in place, never copied).
  void* a_data = nullptr;
  void* b_data = nullptr;
  void* y_data = nullptr;
  if (OrtStatus* s = g_api->GetTensorMutableData(const_cast<OrtValue*>(a), &a_data)) return s;
  if (OrtStatus* s = g_api->GetTensorMutableData(const_cast<OrtValue*>(b), &b_data)) return s;
  if (OrtStatus* s = g_api->GetTensorMutableData(y, &y_data)) return s;
  Problem p{kernel.type, m, kernel.n, kernel.k, kernel.row_bytes, static_cast<const float*>(a_data),
            static_cast<const uint8_t*>(b_data), static_cast<float*>(y_data)};
  const ParallelRunner runner{context, ort_parallel_for};
  const std::string error = run_matmul(p, kernel.precision, kernel.isa, runner, kernel.epilogue);
  if (!error.empty()) return g_api->CreateStatus(ORT_FAIL, ("GgufMatMul: " + error).c_str());
  return nullptr;
}

struct GgufMatMulOp : OrtCustomOp {
  GgufMatMulOp() : OrtCustomOp{} {
    version = ORT_API_VERSION;
    GetName = [](const OrtCustomOp*) { return "GgufMatMul"; };
    GetExecutionProviderType = [](const OrtCustomOp*) { return "CPUExecutionProvider"; };
    GetInputTypeCount = [](const OrtCustomOp*) -> size_t { return 2; };
    GetInputType = [](const OrtCustomOp*, size_t index) {
      return index == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    };
    GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return 1; };
    GetOutputType = [](const OrtCustomOp*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; };
    GetInputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
    GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
    CreateKernelV2 = [](const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info, void** kernel) {
      return create_kernel(op, api, info, kernel);
    };
    KernelComputeV2 = [](void* kernel, OrtKernelContext* context) { return compute(kernel, context); };
    KernelDestroy = [](void* kernel) { delete static_cast<GgufMatMulKernel*>(kernel); };
    GetStartVersion = [](const OrtCustomOp*) { return 1; };
    GetEndVersion = [](const OrtCustomOp*) { return INT_MAX; };
  }
};

const GgufMatMulOp g_op;

}  // namespace
}  // namespace clika_kernels

using clika_kernels::g_api;

// Registers ai.clika::GgufMatMul on the session options (SessionOptions.register_custom_ops_library).
CLIKA_EXPORT OrtStatus* RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  for (uint32_t v = ORT_API_VERSION; v >= clika_kernels::kMinApiVersion && g_api == nullptr; --v) {
    g_api = api_base->GetApi(v);
  }
  if (g_api == nullptr) return nullptr;  // no API table to report with; ORT is older than 1.17
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* s = g_api->CreateCustomOpDomain("ai.clika", &domain)) return s;
  // The domain must outlive every session made from these options, so it is never released.
  if (OrtStatus* s = g_api->CustomOpDomain_Add(domain, &clika_kernels::g_op)) return s;
  return g_api->AddCustomOpDomain(options, domain);
}

// What the library will run with, for the runtime's status line (ctypes).
CLIKA_EXPORT const char* clika_kernels_isa() {
  const clika_kernels::IsaChoice& c = clika_kernels::selected_isa();
  return c.ok ? clika_kernels::isa_name(c.isa) : "";
}

CLIKA_EXPORT const char* clika_kernels_isa_reason() { return clika_kernels::selected_isa().message.c_str(); }

CLIKA_EXPORT const char* clika_kernels_engine(int int8) {
  const clika_kernels::IsaChoice& c = clika_kernels::selected_isa();
  if (!c.ok) return "";
  return clika_kernels::kernel_description(c.isa, int8 ? clika_kernels::Precision::kInt8
                                                        : clika_kernels::Precision::kFp32);
}

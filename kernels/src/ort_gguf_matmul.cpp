// The ONNX Runtime custom op ai.clika::GgufMatMul (since version 1).
//   inputs  A float32 [..., K], B uint8 [N, row_bytes] (GGUF blocks as stored, read in place)
//   output  Y float32 [..., N] = A @ dequant(B)^T, or with activation "swiglu"
//           [..., N/2] = silu(A @ gate^T) * (A @ up^T), gate B's first N/2 rows, up the rest
//   attributes ggml_type, K, N (int), precision "fp32" (default) | "int8",
//              activation "none" (default) | "swiglu",
//              fp32_form "fma" (default) | "split16" (fp32: Q4_0 / Q4_1 as 16-bit integers on VNNI)
#include <string>
#include <vector>

#include "isa.h"
#include "matmul.h"
#include "ort_op_base.h"
#include "ort_support.h"

namespace clika_kernels {
namespace {

constexpr const char* kOp = "GgufMatMul";

struct GgufMatMulKernel {
  int type;
  int64_t k, n, row_bytes;
  Precision precision;
  Isa isa;
  Epilogue epilogue;
};

OrtStatus* create_kernel(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo* info, void** kernel) {
  int64_t type = 0, k = 0, n = 0;
  if (OrtStatus* s = read_int(info, kOp, "ggml_type", &type)) return s;
  if (OrtStatus* s = read_int(info, kOp, "K", &k)) return s;
  if (OrtStatus* s = read_int(info, kOp, "N", &n)) return s;
  std::string error;
  const int64_t row_bytes = stored_row_bytes(static_cast<int>(type), k, &error);
  if (row_bytes < 0) return invalid(kOp, error);
  if (n <= 0) return invalid(kOp, "N=" + std::to_string(n) + " must be positive");
  const std::string precision = read_string(info, "precision", "fp32");
  if (precision != "fp32" && precision != "int8") {
    return invalid(kOp, "precision '" + precision + "' is not one of fp32, int8");
  }
  const std::string fp32_form = read_string(info, "fp32_form", "fma");
  if (fp32_form != "fma" && fp32_form != "split16") {
    return invalid(kOp, "fp32_form '" + fp32_form + "' is not one of fma, split16");
  }
  const std::string activation = read_string(info, "activation", "none");
  if (activation != "none" && activation != "swiglu") {
    return invalid(kOp, "activation '" + activation + "' is not one of none, swiglu");
  }
  const Epilogue epilogue = activation == "swiglu" ? Epilogue::kSwiglu : Epilogue::kNone;
  const std::string epilogue_problem = epilogue_error(epilogue, n);
  if (!epilogue_problem.empty()) return invalid(kOp, epilogue_problem);
  const IsaChoice& isa = selected_isa();
  if (!isa.ok) return invalid(kOp, isa.message);
  const Precision chosen = precision == "int8"        ? Precision::kInt8
                           : fp32_form == "split16" ? Precision::kFp32Split16
                                                    : Precision::kFp32;
  *kernel = new GgufMatMulKernel{static_cast<int>(type), k, n, row_bytes, chosen, isa.isa, epilogue};
  return nullptr;
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
  if (a_shape.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return invalid(kOp, "A must be float32");
  if (b_shape.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8) return invalid(kOp, "B must be uint8");
  if (a_shape.dims.empty() || a_shape.dims.back() != kernel.k) {
    return invalid(kOp, "A has shape " + dims_text(a_shape.dims) + "; its last dimension must be K=" +
                   std::to_string(kernel.k));
  }
  if (b_shape.dims.size() != 2 || b_shape.dims[0] != kernel.n || b_shape.dims[1] != kernel.row_bytes) {
    return invalid(kOp, "B has shape " + dims_text(b_shape.dims) + "; expected [N, row_bytes] = [" +
                   std::to_string(kernel.n) + ", " + std::to_string(kernel.row_bytes) + "]");
  }
  int64_t m = 1;
  for (size_t i = 0; i + 1 < a_shape.dims.size(); ++i) m *= a_shape.dims[i];
  std::vector<int64_t> y_dims = a_shape.dims;
  y_dims.back() = kernel.epilogue == Epilogue::kSwiglu ? kernel.n / 2 : kernel.n;
  OrtValue* y = nullptr;
  if (OrtStatus* s = g_api->KernelContext_GetOutput(context, 0, y_dims.data(), y_dims.size(), &y)) return s;
  // B is read in place, never copied.
  void* a_data = nullptr;
  void* b_data = nullptr;
  void* y_data = nullptr;
  if (OrtStatus* s = tensor_data(a, &a_data)) return s;
  if (OrtStatus* s = tensor_data(b, &b_data)) return s;
  if (OrtStatus* s = g_api->GetTensorMutableData(y, &y_data)) return s;
  Problem p{kernel.type, m, kernel.n, kernel.k, kernel.row_bytes, static_cast<const float*>(a_data),
            static_cast<const uint8_t*>(b_data), static_cast<float*>(y_data)};
  const ParallelRunner runner = ort_runner(context);
  const std::string error = run_matmul(p, kernel.precision, kernel.isa, runner, kernel.epilogue);
  if (!error.empty()) return g_api->CreateStatus(ORT_FAIL, (std::string(kOp) + ": " + error).c_str());
  return nullptr;
}

struct GgufMatMulOp : OrtCustomOp {
  GgufMatMulOp() : OrtCustomOp{} {
    fill_cpu_op_defaults(this);
    GetName = [](const OrtCustomOp*) { return kOp; };
    GetInputTypeCount = [](const OrtCustomOp*) -> size_t { return 2; };
    GetInputType = [](const OrtCustomOp*, size_t index) {
      return index == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    };
    GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return 1; };
    GetOutputType = [](const OrtCustomOp*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; };
    GetInputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    CreateKernelV2 = [](const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info, void** kernel) {
      return create_kernel(op, api, info, kernel);
    };
    KernelComputeV2 = [](void* kernel, OrtKernelContext* context) { return compute(kernel, context); };
    KernelDestroy = [](void* kernel) { delete static_cast<GgufMatMulKernel*>(kernel); };
  }
};

const GgufMatMulOp g_op;

}  // namespace

const OrtCustomOp* gguf_matmul_op() { return &g_op; }

}  // namespace clika_kernels

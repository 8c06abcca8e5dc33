// The ONNX Runtime custom op ai.clika::HeadRescore (since version 1): an output head's
// approximate logits with each token's top_k best recomputed in fp32 (rescore.h), in place
// of TopK, GatherBlockQuantized, Reshape, Unsqueeze, Mul, ReduceSum and ScatterElements.
//   inputs  approx float [T, N], x float [T, K], codes uint8 [N, blocks, block],
//           scales float [N, blocks, 1], zero_points uint8 [N, blocks, 1] (optional: 128)
//   output  logits float [T, N]
//   attributes top_k (int >= 1), block_size (int: codes' last dimension)
#include <string>
#include <vector>

#include "isa.h"
#include "ort_op_base.h"
#include "ort_support.h"
#include "rescore.h"

namespace clika_kernels {
namespace {

constexpr const char* kOp = "HeadRescore";
enum Input { kApprox, kX, kCodes, kScales, kZeroPoints, kInputs };

struct HeadRescoreKernel {
  int64_t top_k, block_size;
  Isa isa;
};

OrtStatus* create_kernel(const OrtKernelInfo* info, void** kernel) {
  int64_t top_k = 0;
  if (OrtStatus* s = read_int(info, kOp, "top_k", &top_k)) return s;
  if (top_k < 1) return invalid(kOp, "top_k=" + std::to_string(top_k) + " must be at least 1");
  int64_t block_size = 0;
  if (OrtStatus* s = read_int(info, kOp, "block_size", &block_size)) return s;
  const IsaChoice& isa = selected_isa();
  if (!isa.ok) return invalid(kOp, isa.message);
  *kernel = new HeadRescoreKernel{top_k, block_size, isa.isa};
  return nullptr;
}

using Inputs = OpInputs<kInputs>;

// The problem's shape from the inputs, or why they do not fit together.
std::string describe(const HeadRescoreKernel& kernel, const Inputs& in, RescoreProblem* p) {
  const std::vector<int64_t>& approx = in.shape[kApprox].dims;
  const std::vector<int64_t>& x = in.shape[kX].dims;
  const std::vector<int64_t>& codes = in.shape[kCodes].dims;
  const std::vector<int64_t>& scales = in.shape[kScales].dims;
  if (approx.size() != 2 || x.size() != 2 || x[0] != approx[0]) {
    return "approx has shape " + dims_text(approx) + " and x " + dims_text(x) + "; expected [T, N] and [T, K]";
  }
  if (codes.size() != 3 || codes[0] != approx[1] || codes[1] * codes[2] != x[1]) {
    return "codes has shape " + dims_text(codes) + "; expected [N=" + std::to_string(approx[1]) +
           ", blocks, block] with blocks * block = K=" + std::to_string(x[1]);
  }
  if (codes[2] != kernel.block_size) {
    return "codes has blocks of " + std::to_string(codes[2]) + "; the node's block_size is " +
           std::to_string(kernel.block_size);
  }
  const std::vector<int64_t> per_block = {codes[0], codes[1], 1};
  if (scales != per_block) return "scales has shape " + dims_text(scales) + "; expected " + dims_text(per_block);
  if (in.value[kZeroPoints] != nullptr && in.shape[kZeroPoints].dims != per_block) {
    return "zero_points has shape " + dims_text(in.shape[kZeroPoints].dims) + "; expected " + dims_text(per_block);
  }
  p->tokens = approx[0];
  p->n = approx[1];
  p->k = x[1];
  p->blocks = codes[1];
  p->block = codes[2];
  p->approx = static_cast<const float*>(in.data[kApprox]);
  p->x = static_cast<const float*>(in.data[kX]);
  p->codes = static_cast<const uint8_t*>(in.data[kCodes]);
  p->scales = static_cast<const float*>(in.data[kScales]);
  p->zero_points = in.value[kZeroPoints] ? static_cast<const uint8_t*>(in.data[kZeroPoints]) : nullptr;
  return "";
}

OrtStatus* compute(void* op_kernel, OrtKernelContext* context) {
  const HeadRescoreKernel& kernel = *static_cast<const HeadRescoreKernel*>(op_kernel);
  Inputs in;
  if (OrtStatus* s = read_inputs(context, &in)) return s;
  for (Input required : {kApprox, kX, kCodes, kScales}) {
    if (in.value[required] == nullptr) return invalid(kOp, "input " + std::to_string(required) + " is missing");
  }
  RescoreProblem p{};
  p.top_k = kernel.top_k;
  const std::string problem = describe(kernel, in, &p);
  if (!problem.empty()) return invalid(kOp, problem);
  OrtValue* out = nullptr;
  const std::vector<int64_t>& dims = in.shape[kApprox].dims;
  if (OrtStatus* s = g_api->KernelContext_GetOutput(context, 0, dims.data(), dims.size(), &out)) return s;
  void* out_data = nullptr;
  if (OrtStatus* s = g_api->GetTensorMutableData(out, &out_data)) return s;
  p.out = static_cast<float*>(out_data);
  const std::string error = run_rescore(p, kernel.isa, ort_runner(context));
  if (!error.empty()) return invalid(kOp, error);
  return nullptr;
}

ONNXTensorElementDataType input_type(size_t index) {
  if (index == kCodes || index == kZeroPoints) return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}

struct HeadRescoreOp : OrtCustomOp {
  HeadRescoreOp() : OrtCustomOp{} {
    fill_cpu_op_defaults(this);
    GetName = [](const OrtCustomOp*) { return kOp; };
    GetInputTypeCount = [](const OrtCustomOp*) -> size_t { return kInputs; };
    GetInputType = [](const OrtCustomOp*, size_t index) { return input_type(index); };
    GetInputCharacteristic = [](const OrtCustomOp*, size_t index) {
      return index == kZeroPoints ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
    };
    GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return 1; };
    GetOutputType = [](const OrtCustomOp*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; };
    CreateKernelV2 = [](const OrtCustomOp*, const OrtApi*, const OrtKernelInfo* info, void** kernel) {
      return create_kernel(info, kernel);
    };
    KernelComputeV2 = [](void* kernel, OrtKernelContext* context) { return compute(kernel, context); };
    KernelDestroy = [](void* kernel) { delete static_cast<HeadRescoreKernel*>(kernel); };
  }
};

const HeadRescoreOp g_op;

}  // namespace

const OrtCustomOp* head_rescore_op() { return &g_op; }

}  // namespace clika_kernels

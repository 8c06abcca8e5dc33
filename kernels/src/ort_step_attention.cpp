// The ONNX Runtime custom op ai.clika::StepAttention (since version 1): the step graph's
// attention over packed tokens, in place of GroupQueryAttention and the grid gathers
// around it (attention.h has the arithmetic).
//   inputs  qkv float [T, (heads + 2 kv_heads) * head_dim], token_cell int64 [T, 2],
//           query_seqlens, seqlens_k int32 [B], past_key, past_value float
//           [B, kv_heads, capacity, head_dim], cos_cache, sin_cache float [P, r/2] (optional)
//   outputs output float [T, heads * head_dim], present_key, present_value (the pasts with
//           the new tokens written; bound to the same buffers as the pasts, nothing is copied)
//   attributes num_heads, kv_num_heads (int), scale (float, 0: 1/sqrt(head_dim)),
//              softcap (float, 0: none), local_window_size (int, -1: none)
#include <cstring>
#include <string>
#include <vector>

#include "attention.h"
#include "isa.h"
#include "ort_op_base.h"
#include "ort_support.h"

namespace clika_kernels {
namespace {

constexpr const char* kOp = "StepAttention";
enum Input { kQkv, kCells, kQuerySeqlens, kSeqlensK, kPastKey, kPastValue, kCos, kSin, kInputs };

struct StepAttentionKernel {
  int64_t num_heads, kv_heads;
  float scale, softcap;
  int64_t window;
  Isa isa;
};

OrtStatus* create_kernel(const OrtKernelInfo* info, void** kernel) {
  int64_t heads = 0, kv_heads = 0;
  if (OrtStatus* s = read_int(info, kOp, "num_heads", &heads)) return s;
  if (OrtStatus* s = read_int(info, kOp, "kv_num_heads", &kv_heads)) return s;
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) {
    return invalid(kOp, "num_heads=" + std::to_string(heads) + " must be a positive multiple of kv_num_heads=" +
                            std::to_string(kv_heads));
  }
  const float softcap = read_float_or(info, "softcap", 0.0f);
  const int64_t window = read_int_or(info, "local_window_size", -1);
  if (!(softcap >= 0.0f) || window == 0 || window < -1) {
    return invalid(kOp, "softcap must be >= 0 and local_window_size -1 or positive");
  }
  const IsaChoice& isa = selected_isa();
  if (!isa.ok) return invalid(kOp, isa.message);
  *kernel = new StepAttentionKernel{heads, kv_heads, read_float_or(info, "scale", 0.0f), softcap,
                                    window > 0 ? window : 0, isa.isa};
  return nullptr;
}

using Inputs = OpInputs<kInputs>;

std::string expect(const TensorShape& shape, const char* name, ONNXTensorElementDataType type,
                   const std::vector<int64_t>& dims) {
  bool same = shape.type == type && shape.dims.size() == dims.size();
  for (size_t i = 0; same && i < dims.size(); ++i) same = dims[i] < 0 || dims[i] == shape.dims[i];
  if (same) return "";
  std::string wanted = "[";
  for (size_t i = 0; i < dims.size(); ++i) wanted += (i ? ", " : "") + (dims[i] < 0 ? "?" : std::to_string(dims[i]));
  return std::string(name) + " has shape " + dims_text(shape.dims) + " (element type " +
         std::to_string(shape.type) + "); expected " + wanted + "] of element type " + std::to_string(type);
}

// The problem's shape from the inputs, or why they do not fit together.
std::string describe(const StepAttentionKernel& k, const Inputs& in, AttentionProblem* p) {
  const auto kFloat = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  const auto kInt32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
  const TensorShape& past = in.shape[kPastKey];
  if (past.dims.size() != 4) return "past_key has shape " + dims_text(past.dims) + "; expected 4 dimensions";
  const int64_t rows = past.dims[0], head_dim = past.dims[3];
  if (past.dims[1] != k.kv_heads || head_dim % 16 != 0 || head_dim <= 0) {
    return "past_key has shape " + dims_text(past.dims) + "; expected [rows, kv_num_heads=" +
           std::to_string(k.kv_heads) + ", capacity, head_dim a multiple of 16]";
  }
  const int64_t width = (k.num_heads + 2 * k.kv_heads) * head_dim;
  std::string e = expect(in.shape[kQkv], "qkv", kFloat, {-1, width});
  if (e.empty()) e = expect(in.shape[kCells], "token_cell", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                            {in.shape[kQkv].dims[0], 2});
  if (e.empty()) e = expect(in.shape[kQuerySeqlens], "query_seqlens", kInt32, {rows});
  if (e.empty()) e = expect(in.shape[kSeqlensK], "seqlens_k", kInt32, {rows});
  if (e.empty()) e = expect(in.shape[kPastValue], "past_value", kFloat, past.dims);
  if (e.empty() && past.type != kFloat) e = "past_key must be float32";
  const bool rotary = in.value[kCos] != nullptr;
  if (e.empty() && rotary != (in.value[kSin] != nullptr)) e = "cos_cache and sin_cache come together";
  int64_t half = 0;
  if (e.empty() && rotary) {
    e = expect(in.shape[kCos], "cos_cache", kFloat, {-1, -1});
    if (e.empty()) half = in.shape[kCos].dims[1];
    if (e.empty()) e = expect(in.shape[kSin], "sin_cache", kFloat, in.shape[kCos].dims);
    if (e.empty() && (half <= 0 || 2 * half > head_dim)) {
      e = "cos_cache has " + std::to_string(half) + " columns; a head of " + std::to_string(head_dim) +
          " rotates at most " + std::to_string(head_dim / 2) + " pairs";
    }
  }
  if (!e.empty()) return e;
  p->shape = AttentionShape{k.num_heads, k.kv_heads, head_dim, half, attention_scale(k.scale, head_dim), k.softcap,
                            k.window};
  p->tokens = in.shape[kQkv].dims[0];
  p->rows = rows;
  p->capacity = past.dims[2];
  p->qkv = static_cast<const float*>(in.data[kQkv]);
  p->cells = static_cast<const int64_t*>(in.data[kCells]);
  p->query_seqlens = static_cast<const int32_t*>(in.data[kQuerySeqlens]);
  p->seqlens_k = static_cast<const int32_t*>(in.data[kSeqlensK]);
  p->cos = rotary ? static_cast<const float*>(in.data[kCos]) : nullptr;
  p->sin = rotary ? static_cast<const float*>(in.data[kSin]) : nullptr;
  p->positions = rotary ? in.shape[kCos].dims[0] : 0;
  return "";
}

// A present output; where it is not the past's own buffer, it starts as a copy of the past.
OrtStatus* present(OrtKernelContext* context, size_t index, const Inputs& in, Input past, float** data) {
  const TensorShape& shape = in.shape[past];
  OrtValue* value = nullptr;
  if (OrtStatus* s = g_api->KernelContext_GetOutput(context, index, shape.dims.data(), shape.dims.size(), &value)) {
    return s;
  }
  void* out = nullptr;
  if (OrtStatus* s = g_api->GetTensorMutableData(value, &out)) return s;
  if (out != in.data[past]) {
    size_t count = 1;
    for (int64_t d : shape.dims) count *= static_cast<size_t>(d);
    std::memcpy(out, in.data[past], count * sizeof(float));
  }
  *data = static_cast<float*>(out);
  return nullptr;
}

OrtStatus* compute(void* op_kernel, OrtKernelContext* context) {
  const StepAttentionKernel& kernel = *static_cast<const StepAttentionKernel*>(op_kernel);
  Inputs in;
  if (OrtStatus* s = read_inputs(context, &in)) return s;
  for (Input required : {kQkv, kCells, kQuerySeqlens, kSeqlensK, kPastKey, kPastValue}) {
    if (in.value[required] == nullptr) return invalid(kOp, "input " + std::to_string(required) + " is missing");
  }
  AttentionProblem p{};
  const std::string problem = describe(kernel, in, &p);
  if (!problem.empty()) return invalid(kOp, problem);
  std::vector<int64_t> out_dims = {p.tokens, p.shape.num_heads * p.shape.head_dim};
  OrtValue* out = nullptr;
  if (OrtStatus* s = g_api->KernelContext_GetOutput(context, 0, out_dims.data(), out_dims.size(), &out)) return s;
  void* out_data = nullptr;
  if (OrtStatus* s = g_api->GetTensorMutableData(out, &out_data)) return s;
  p.out = static_cast<float*>(out_data);
  if (OrtStatus* s = present(context, 1, in, kPastKey, &p.key_cache)) return s;
  if (OrtStatus* s = present(context, 2, in, kPastValue, &p.value_cache)) return s;
  const std::string error = run_attention(p, kernel.isa, ort_runner(context));
  if (!error.empty()) return invalid(kOp, error);
  return nullptr;
}

ONNXTensorElementDataType input_type(size_t index) {
  if (index == kCells) return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  if (index == kQuerySeqlens || index == kSeqlensK) return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}

struct StepAttentionOp : OrtCustomOp {
  StepAttentionOp() : OrtCustomOp{} {
    fill_cpu_op_defaults(this);
    GetName = [](const OrtCustomOp*) { return kOp; };
    GetInputTypeCount = [](const OrtCustomOp*) -> size_t { return kInputs; };
    GetInputType = [](const OrtCustomOp*, size_t index) { return input_type(index); };
    GetInputCharacteristic = [](const OrtCustomOp*, size_t index) {
      return index >= kCos ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
    };
    GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return 3; };
    GetOutputType = [](const OrtCustomOp*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; };
    CreateKernelV2 = [](const OrtCustomOp*, const OrtApi*, const OrtKernelInfo* info, void** kernel) {
      return create_kernel(info, kernel);
    };
    KernelComputeV2 = [](void* kernel, OrtKernelContext* context) { return compute(kernel, context); };
    KernelDestroy = [](void* kernel) { delete static_cast<StepAttentionKernel*>(kernel); };
  }
};

const StepAttentionOp g_op;

}  // namespace

const OrtCustomOp* step_attention_op() { return &g_op; }

}  // namespace clika_kernels

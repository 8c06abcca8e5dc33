// What every op of the library needs from ORT's C API: the API table (set once when the
// library registers), attribute and shape reading, errors, and the intra-op thread pool.
#pragma once

#include <onnxruntime_c_api.h>

#include <string>
#include <vector>

#include "matmul.h"

namespace clika_kernels {

extern const OrtApi* g_api;

struct TensorShape {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> dims;
};

// An ORT_INVALID_ARGUMENT status whose message starts with the op's name.
OrtStatus* invalid(const char* op, const std::string& message);
// A required int attribute (an error naming it when missing).
OrtStatus* read_int(const OrtKernelInfo* info, const char* op, const char* name, int64_t* out);
// Optional attributes: a missing one reads as the default.
int64_t read_int_or(const OrtKernelInfo* info, const char* name, int64_t fallback);
float read_float_or(const OrtKernelInfo* info, const char* name, float fallback);
std::string read_string(const OrtKernelInfo* info, const char* name, const char* fallback);
OrtStatus* shape_of(const OrtValue* value, TensorShape* out);
std::string dims_text(const std::vector<int64_t>& dims);
// A tensor's data; the C API has no const accessor, so inputs are cast and only read.
OrtStatus* tensor_data(const OrtValue* value, void** data);
// Runs tasks on the kernel context's intra-op pool.
ParallelRunner ort_runner(OrtKernelContext* context);

// An op's first N inputs: value (null where an optional one is absent), shape and data.
template <size_t N>
struct OpInputs {
  const OrtValue* value[N] = {};
  TensorShape shape[N];
  void* data[N] = {};
};

OrtStatus* read_input(OrtKernelContext* context, size_t index, const OrtValue** value, TensorShape* shape,
                      void** data);

template <size_t N>
OrtStatus* read_inputs(OrtKernelContext* context, OpInputs<N>* in) {
  size_t count = 0;
  if (OrtStatus* s = g_api->KernelContext_GetInputCount(context, &count)) return s;
  for (size_t i = 0; i < N && i < count; ++i) {
    if (OrtStatus* s = read_input(context, i, &in->value[i], &in->shape[i], &in->data[i])) return s;
  }
  return nullptr;
}

// The op descriptions RegisterCustomOps adds to the ai.clika domain.
const OrtCustomOp* gguf_matmul_op();
const OrtCustomOp* step_attention_op();
const OrtCustomOp* head_rescore_op();

}  // namespace clika_kernels

// The fields every op of the library fills the same way in ORT's OrtCustomOp table; an op
// supplies its name, its input and output types, and its kernel's create / compute.
#pragma once

#include <onnxruntime_c_api.h>

#include <climits>

namespace clika_kernels {

inline void fill_cpu_op_defaults(OrtCustomOp* op) {
  op->version = ORT_API_VERSION;
  op->GetExecutionProviderType = [](const OrtCustomOp*) { return "CPUExecutionProvider"; };
  op->GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
  op->GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  op->GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
  op->GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  op->GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
  op->GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  op->GetStartVersion = [](const OrtCustomOp*) { return 1; };
  op->GetEndVersion = [](const OrtCustomOp*) { return INT_MAX; };
}

}  // namespace clika_kernels

#include "ort_support.h"

namespace clika_kernels {

const OrtApi* g_api = nullptr;

OrtStatus* invalid(const char* op, const std::string& message) {
  return g_api->CreateStatus(ORT_INVALID_ARGUMENT, (std::string(op) + ": " + message).c_str());
}

OrtStatus* read_int(const OrtKernelInfo* info, const char* op, const char* name, int64_t* out) {
  OrtStatus* status = g_api->KernelInfoGetAttribute_int64(info, name, out);
  if (status == nullptr) return nullptr;
  g_api->ReleaseStatus(status);
  return invalid(op, std::string("the int attribute '") + name + "' is missing");
}

namespace {

// An attribute through one of the API's typed getters, or the default where it is missing.
template <class T, class Getter>
T read_or(Getter getter, const OrtKernelInfo* info, const char* name, T fallback) {
  T value = fallback;
  OrtStatus* status = (g_api->*getter)(info, name, &value);
  if (status == nullptr) return value;
  g_api->ReleaseStatus(status);
  return fallback;
}

}  // namespace

int64_t read_int_or(const OrtKernelInfo* info, const char* name, int64_t fallback) {
  return read_or(&OrtApi::KernelInfoGetAttribute_int64, info, name, fallback);
}

float read_float_or(const OrtKernelInfo* info, const char* name, float fallback) {
  return read_or(&OrtApi::KernelInfoGetAttribute_float, info, name, fallback);
}

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

OrtStatus* tensor_data(const OrtValue* value, void** data) {
  return g_api->GetTensorMutableData(const_cast<OrtValue*>(value), data);
}

namespace {

bool ort_parallel_for(void* context, void (*fn)(void*, size_t), size_t total, void* data) {
  OrtStatus* s = g_api->KernelContext_ParallelFor(static_cast<const OrtKernelContext*>(context), fn, total, 0, data);
  if (s == nullptr) return true;
  g_api->ReleaseStatus(s);
  return false;
}

}  // namespace

ParallelRunner ort_runner(OrtKernelContext* context) { return ParallelRunner{context, ort_parallel_for}; }

OrtStatus* read_input(OrtKernelContext* context, size_t index, const OrtValue** value, TensorShape* shape,
                      void** data) {
  if (OrtStatus* s = g_api->KernelContext_GetInput(context, index, value)) return s;
  if (*value == nullptr) return nullptr;
  if (OrtStatus* s = shape_of(*value, shape)) return s;
  return tensor_data(*value, data);
}

}  // namespace clika_kernels

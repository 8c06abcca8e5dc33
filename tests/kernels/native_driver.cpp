// Runs GgufMatMul cases through the kernel library's own entry point (run_matmul), without
// ONNX Runtime, so a cross-compiled build can be checked under an emulator (qemu-aarch64).
//
//   native_driver CASES OUT
// CASES holds, per case: int64 ggml_type, k, n, rows, int8 (0 fp32, 1 int8), swiglu (0 none,
// 1 the gated activation), count, then `count` int64 row counts m, then the blocks (n * row
// bytes) and the activations (rows * k float32). OUT receives, per case and row count m, Y
// of the first m rows (m * n float32, or m * n / 2 with the activation). stdout gets the ISA and the engines; a failure exits non-zero, saying why.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "isa.h"
#include "matmul.h"

using namespace clika_kernels;

namespace {

struct Reader {
  const std::vector<char>& bytes;
  size_t at = 0;
  bool take(void* out, size_t size) {
    if (at + size > bytes.size()) return false;
    std::copy(bytes.begin() + at, bytes.begin() + at + size, static_cast<char*>(out));
    at += size;
    return true;
  }
};

int fail(const std::string& message) {
  std::fprintf(stderr, "native_driver: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: native_driver CASES OUT");
  const IsaChoice& isa = selected_isa();
  if (!isa.ok) return fail(isa.message);
  std::printf("%s\n%s\n%s\n", isa_name(isa.isa), kernel_description(isa.isa, Precision::kFp32),
              kernel_description(isa.isa, Precision::kInt8));
  std::ifstream in(argv[1], std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(argv[2], std::ios::binary);
  Reader reader{bytes};
  while (reader.at < bytes.size()) {
    int64_t head[7];
    if (!reader.take(head, sizeof head)) return fail("truncated case header");
    const int type = static_cast<int>(head[0]);
    const int64_t k = head[1], n = head[2], rows = head[3], count = head[6];
    const Epilogue epilogue = head[5] ? Epilogue::kSwiglu : Epilogue::kNone;
    const int64_t outputs = head[5] ? n / 2 : n;
    std::string error;
    const int64_t row_bytes = stored_row_bytes(type, k, &error);
    if (row_bytes < 0) return fail(error);
    std::vector<int64_t> ms(count);
    std::vector<uint8_t> b(n * row_bytes);
    std::vector<float> a(rows * k);
    if (!reader.take(ms.data(), count * 8) || !reader.take(b.data(), b.size()) ||
        !reader.take(a.data(), a.size() * 4)) {
      return fail("truncated case body");
    }
    for (int64_t m : ms) {
      std::vector<float> y(m * outputs);
      const Problem p{type, m, n, k, row_bytes, a.data(), b.data(), y.data()};
      error = run_matmul(p, head[4] ? Precision::kInt8 : Precision::kFp32, isa.isa, serial_runner(), epilogue);
      if (!error.empty()) return fail(error);
      out.write(reinterpret_cast<const char*>(y.data()), static_cast<std::streamsize>(y.size() * 4));
    }
  }
  return 0;
}

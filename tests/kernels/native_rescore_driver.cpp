// Runs HeadRescore cases through the kernel library's own entry point (run_rescore), without
// ONNX Runtime, so a cross-compiled build can be checked under an emulator.
//
//   native_rescore_driver CASES OUT
// CASES holds, per case: int64 tokens, n, blocks, block, top_k, has_zero_points; then approx
// (tokens x n float32), x (tokens x blocks * block float32), codes (n x blocks x block uint8),
// scales (n x blocks float32) and, where has_zero_points, zero points (n x blocks uint8).
// OUT receives, per case, the logits (tokens x n float32).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "isa.h"
#include "native_cases.h"
#include "rescore.h"

using namespace clika_kernels;

namespace {

int fail(const std::string& message) { return driver_failed("native_rescore_driver", message); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: native_rescore_driver CASES OUT");
  const IsaChoice& isa = selected_isa();
  if (!isa.ok) return fail(isa.message);
  std::printf("%s\n", isa_name(isa.isa));
  std::ifstream in(argv[1], std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(argv[2], std::ios::binary);
  CaseReader reader{bytes};
  while (reader.at < bytes.size()) {
    std::vector<int64_t> head;
    if (!reader.take(&head, 6)) return fail("truncated case header");
    RescoreProblem p{};
    p.tokens = head[0];
    p.n = head[1];
    p.blocks = head[2];
    p.block = head[3];
    p.k = p.blocks * p.block;
    p.top_k = head[4];
    std::vector<float> approx, x, scales;
    std::vector<uint8_t> codes, zero_points;
    bool ok = reader.take(&approx, p.tokens * p.n) && reader.take(&x, p.tokens * p.k) &&
              reader.take(&codes, p.n * p.k) && reader.take(&scales, p.n * p.blocks);
    if (ok && head[5]) ok = reader.take(&zero_points, p.n * p.blocks);
    if (!ok) return fail("truncated case body");
    std::vector<float> logits(p.tokens * p.n);
    p.approx = approx.data();
    p.x = x.data();
    p.codes = codes.data();
    p.scales = scales.data();
    p.zero_points = head[5] ? zero_points.data() : nullptr;
    p.out = logits.data();
    const std::string error = run_rescore(p, isa.isa, serial_runner());
    if (!error.empty()) return fail(error);
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  }
  return 0;
}

// Runs StepAttention cases through the kernel library's own entry point (run_attention),
// without ONNX Runtime, so a cross-compiled build can be checked under an emulator.
//
//   native_attention_driver CASES OUT
// CASES holds, per case: int64 heads, kv_heads, head_dim, capacity, rotary_half (0: none),
// window (0: none), rows, tokens, positions; float32 scale (0: 1/sqrt(head_dim)), softcap;
// then qkv (tokens x width float32), token_cell (tokens x 2 int64), query_seqlens and
// seqlens_k (rows int32 each), past_key and past_value (rows x kv_heads x capacity x
// head_dim float32), and with rotary cos and sin (positions x rotary_half float32). OUT
// receives, per case, the output (tokens x heads x head_dim), then the two caches.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "attention.h"
#include "isa.h"
#include "native_cases.h"

using namespace clika_kernels;

namespace {

int fail(const std::string& message) { return driver_failed("native_attention_driver", message); }

void write(std::ofstream& out, const std::vector<float>& v) {
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: native_attention_driver CASES OUT");
  const IsaChoice& isa = selected_isa();
  if (!isa.ok) return fail(isa.message);
  std::printf("%s\n", isa_name(isa.isa));
  std::ifstream in(argv[1], std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(argv[2], std::ios::binary);
  CaseReader reader{bytes};
  while (reader.at < bytes.size()) {
    std::vector<int64_t> head;
    std::vector<float> knobs;
    if (!reader.take(&head, 9) || !reader.take(&knobs, 2)) return fail("truncated case header");
    const int64_t heads = head[0], kv_heads = head[1], head_dim = head[2], capacity = head[3];
    const int64_t half = head[4], rows = head[6], tokens = head[7], positions = head[8];
    const int64_t cache = rows * kv_heads * capacity * head_dim;
    std::vector<float> qkv, keys, values, cos, sin;
    std::vector<int64_t> cells;
    std::vector<int32_t> query_seqlens, seqlens_k;
    bool ok = reader.take(&qkv, tokens * (heads + 2 * kv_heads) * head_dim) && reader.take(&cells, 2 * tokens) &&
              reader.take(&query_seqlens, rows) && reader.take(&seqlens_k, rows) && reader.take(&keys, cache) &&
              reader.take(&values, cache);
    if (ok && half > 0) ok = reader.take(&cos, positions * half) && reader.take(&sin, positions * half);
    if (!ok) return fail("truncated case body");
    AttentionProblem p{};
    p.shape = AttentionShape{heads, kv_heads, head_dim, half, attention_scale(knobs[0], head_dim), knobs[1], head[5]};
    p.tokens = tokens;
    p.rows = rows;
    p.capacity = capacity;
    p.qkv = qkv.data();
    p.cells = cells.data();
    p.query_seqlens = query_seqlens.data();
    p.seqlens_k = seqlens_k.data();
    p.cos = half > 0 ? cos.data() : nullptr;
    p.sin = half > 0 ? sin.data() : nullptr;
    p.positions = half > 0 ? positions : 0;
    p.key_cache = keys.data();
    p.value_cache = values.data();
    std::vector<float> output(tokens * heads * head_dim);
    p.out = output.data();
    const std::string error = run_attention(p, isa.isa, serial_runner());
    if (!error.empty()) return fail(error);
    write(out, output);
    write(out, keys);
    write(out, values);
  }
  return 0;
}

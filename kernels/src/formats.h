// GGUF block formats: sizes, fp16 scales, and the decode of one row into a common form.
//
// Every format is decoded into the same three arrays, so each ISA needs one dot-product
// engine rather than one per format:
//   codes[k]    an unsigned integer code (0..255) for weight k,
//   scale16[g]  and bias16[g] for each group g of 16 weights, with
//   weight[k] = scale16[k / 16] * codes[k] + bias16[k / 16].
// Symmetric formats fold their zero point into the bias (Q4_0: codes 0..15, bias -8 d;
// Q8_0: codes q + 128, bias -128 d), so integer dot products stay unsigned x signed.
//
// Everything here has internal linkage: each ISA's translation unit compiles its own copy
// under its own target options, and no copy may leak into another through the linker.
#pragma once

#include <cstdint>
#include <cstring>

namespace clika_kernels {
namespace {

enum GgmlType : int {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
};

struct BlockLayout {
  int weights;  // weights per block
  int bytes;    // bytes per block
};

// Returns false for a type id this library does not compute.
inline bool block_layout(int type, BlockLayout* out) {
  switch (type) {
    case kQ4_0: *out = {32, 18}; return true;
    case kQ4_1: *out = {32, 20}; return true;
    case kQ5_0: *out = {32, 22}; return true;
    case kQ5_1: *out = {32, 24}; return true;
    case kQ8_0: *out = {32, 34}; return true;
    case kQ4_K: *out = {256, 144}; return true;
    case kQ5_K: *out = {256, 176}; return true;
    case kQ6_K: *out = {256, 210}; return true;
    default: return false;
  }
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half to float, exact for every input: normals by rebiasing the exponent with one
// exact multiply, subnormals through a normal float whose mantissa holds them (no
// denormal arithmetic, so a flush-to-zero mode cannot lose them), inf and NaN kept.
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  uint32_t out;
  if (magnitude >= 0x7c00u) {  // inf or NaN
    out = 0x7f800000u | ((magnitude & 0x3ffu) << 13);
  } else if (magnitude >= 0x0400u) {  // normal: exponent bias 15 -> 127
    out = float_bits(bits_float(magnitude << 13) * 0x1p112f);
  } else {  // subnormal or zero: 0x3f000000 | m is 0.5 + m * 2^-24, so subtracting 0.5 leaves m * 2^-24
    out = float_bits(bits_float(0x3f000000u | magnitude) - 0.5f);
  }
  return bits_float(sign | out);
}

inline float read_fp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block.
inline void k_scale_min(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

inline void set_groups(float* scale16, float* bias16, int first, int count, float scale, float bias) {
  for (int g = 0; g < count; ++g) {
    scale16[first + g] = scale;
    bias16[first + g] = bias;
  }
}

inline void decode_q4_0(const uint8_t* b, uint8_t* codes, float* s, float* z) {
  const float d = read_fp16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    codes[j] = qs[j] & 0x0f;
    codes[j + 16] = qs[j] >> 4;
  }
  set_groups(s, z, 0, 2, d, -8.0f * d);
}

inline void decode_q4_1(const uint8_t* b, uint8_t* codes, float* s, float* z) {
  const float d = read_fp16(b);
  const float m = read_fp16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    codes[j] = qs[j] & 0x0f;
    codes[j + 16] = qs[j] >> 4;
  }
  set_groups(s, z, 0, 2, d, m);
}

// Q5_0 / Q5_1: the fifth bit of weight j is bit j of the 32-bit qh.
inline void five_bit_codes(const uint8_t* qh_bytes, const uint8_t* qs, uint8_t* codes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    codes[j] = static_cast<uint8_t>((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
    codes[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
}

inline void decode_q5_0(const uint8_t* b, uint8_t* codes, float* s, float* z) {
  const float d = read_fp16(b);
  five_bit_codes(b + 2, b + 6, codes);
  set_groups(s, z, 0, 2, d, -16.0f * d);
}

inline void decode_q5_1(const uint8_t* b, uint8_t* codes, float* s, float* z) {
  const float d = read_fp16(b);
  const float m = read_fp16(b + 2);
  five_bit_codes(b + 4, b + 8, codes);
  set_groups(s, z, 0, 2, d, m);
}

inline void decode_q8_0(const uint8_t* b, uint8_t* codes, float* s, float* z) {
  const float d = read_fp16(b);
  for (int j = 0; j < 32; ++j) codes[j] = b[2 + j] ^ 0x80;  // q + 128
  set_groups(s, z, 0, 2, d, -128.0f * d);
}

inline void k_quant_groups(const uint8_t* scales, float d, float dmin, float* s, float* z) {
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k_scale_min(j, scales, &sc, &m);
    set_groups(s, z, 2 * j, 2, d * static_cast<float>(sc), -(dmin * static_cast<float>(m)));
  }
}

inline void decode_q4_k(const uint8_t* b, uint8_t* codes, float* s, float* z) {
  k_quant_groups(b + 4, read_fp16(b), read_fp16(b + 2), s, z);
  const uint8_t* qs = b + 16;
  for (int i = 0; i < 4; ++i) {  // 64 weights per 32 bytes: low nibbles, then high
    for (int l = 0; l < 32; ++l) {
      codes[64 * i + l] = qs[32 * i + l] & 0x0f;
      codes[64 * i + 32 + l] = qs[32 * i + l] >> 4;
    }
  }
}

inline void decode_q5_k(const uint8_t* b, uint8_t* codes, float* s, float* z) {
  k_quant_groups(b + 4, read_fp16(b), read_fp16(b + 2), s, z);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int i = 0; i < 4; ++i) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q = qs[32 * i + l];
      const uint8_t h = qh[l];
      codes[64 * i + l] = static_cast<uint8_t>((q & 0x0f) | (((h >> (2 * i)) & 1) << 4));
      codes[64 * i + 32 + l] = static_cast<uint8_t>((q >> 4) | (((h >> (2 * i + 1)) & 1) << 4));
    }
  }
}

inline void decode_q6_k(const uint8_t* b, uint8_t* codes, float* s, float* z) {
  const float d = read_fp16(b + 208);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int g = 0; g < 16; ++g) {
    const float scale = d * static_cast<float>(sc[g]);
    s[g] = scale;
    z[g] = -32.0f * scale;
  }
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    uint8_t* c = codes + 128 * half;
    for (int l = 0; l < 32; ++l) {
      c[l] = static_cast<uint8_t>((ql[l] & 0x0f) | ((qh[l] & 3) << 4));
      c[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4));
      c[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      c[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

// Decodes one row of K weights (K a multiple of the block) into codes / scale16 / bias16.
// The switch is outside the block loop so each loop is one format's straight-line code.
template <void (*Decode)(const uint8_t*, uint8_t*, float*, float*), int Weights, int Bytes>
inline void decode_blocks(const uint8_t* row, int64_t k, uint8_t* codes, float* s, float* z) {
  for (int64_t i = 0; i < k / Weights; ++i) {
    Decode(row + i * Bytes, codes + i * Weights, s + i * (Weights / 16), z + i * (Weights / 16));
  }
}

inline void decode_row(int type, const uint8_t* row, int64_t k, uint8_t* codes, float* s, float* z) {
  switch (type) {
    case kQ4_0: decode_blocks<decode_q4_0, 32, 18>(row, k, codes, s, z); break;
    case kQ4_1: decode_blocks<decode_q4_1, 32, 20>(row, k, codes, s, z); break;
    case kQ5_0: decode_blocks<decode_q5_0, 32, 22>(row, k, codes, s, z); break;
    case kQ5_1: decode_blocks<decode_q5_1, 32, 24>(row, k, codes, s, z); break;
    case kQ8_0: decode_blocks<decode_q8_0, 32, 34>(row, k, codes, s, z); break;
    case kQ4_K: decode_blocks<decode_q4_k, 256, 144>(row, k, codes, s, z); break;
    case kQ5_K: decode_blocks<decode_q5_k, 256, 176>(row, k, codes, s, z); break;
    case kQ6_K: decode_blocks<decode_q6_k, 256, 210>(row, k, codes, s, z); break;
    default: break;
  }
}

// The zero point symmetric formats fold into their bias (weight = d * (code - zero)),
// or 0 for the formats with a bias of their own (Q4_1, Q5_1, Q4_K, Q5_K).
inline int symmetric_zero(int type) {
  switch (type) {
    case kQ4_0: return 8;
    case kQ5_0: return 16;
    case kQ8_0: return 128;
    case kQ6_K: return 32;
    default: return 0;
  }
}

// Largest code a format produces: the int8 engines without VNNI multiply codes by
// activations in saturating 16-bit pairs, safe only for codes below 128 (all but Q8_0).
inline int max_code(int type) { return type == kQ8_0 ? 255 : 63; }

}  // namespace
}  // namespace clika_kernels

// GGUF blocks decoded in AVX-512 registers, for the in-register engines (avx512_fp32.cpp,
// avx512_vnni.cpp): nothing of a weight row goes through memory but its own bytes.
//
// A row is walked in units of at most 256 weights: one super-block for the K formats, up
// to 8 blocks for the 32-weight formats. Per unit a format writes the scale and bias of every 16-weight group
// (weight = scale16[g] * code + bias16[g], the same values decode_row computes in
// formats.h), and per chunk of 64 weights it returns their 64 unsigned codes in one
// register, in weight order. A last chunk of 32 weights (an odd number of 32-weight
// blocks) reads only its own block and leaves the upper 32 codes zero.
//
// fp16 scales go through the F16C conversion, which is exact for every input
// (subnormals included, whatever the denormal mode).
// Included after each engine's target options, so it compiles for that ISA.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace clika_kernels {
namespace {

constexpr int kMaxUnitGroups = 16;  // 256 weights

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline float half_at(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

inline __m512i nibble_mask() { return _mm512_set1_epi8(0x0f); }

// The 64 codes of two 32-weight blocks from their 16-byte nibble runs q0, q1: weight j of
// a block is the low nibble of byte j, weight j + 16 its high nibble. Each run is
// broadcast to two 128-bit lanes, [q0, q0, q1, q1], and the second of each pair shifted.
inline __m512i block_pair_nibbles(const uint8_t* q0, const uint8_t* q1, bool half) {
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q0));
  __m512i z = _mm512_broadcast_i32x4(b0);
  if (half) {
    z = _mm512_maskz_mov_epi32(0x00ff, z);
  } else {
    z = _mm512_mask_broadcast_i32x4(z, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)));
  }
  const __m512i shifts = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
  return _mm512_and_si512(_mm512_srlv_epi64(z, shifts), nibble_mask());
}

// The 4 bytes at `at` of each of `blocks` (<= 8) blocks, zero past the last. Plain loads:
// the scales of 32-weight blocks lie 18-34 bytes apart, and a hardware gather costs more.
template <int Bytes>
inline __m256i block_words(const uint8_t* unit, int blocks, int at) {
  const uint8_t* p = unit + at;
  auto word = [p, blocks](int b) { return b < blocks ? load_u32(p + b * Bytes) : 0u; };
  return _mm256_setr_epi32(word(0), word(1), word(2), word(3), word(4), word(5), word(6), word(7));
}

// Scales of 32-weight blocks: the fp16 d at the block's start and, when `has_m`, the fp16
// bias m right after it; symmetric formats take the bias -zero * d.
template <int Bytes>
inline void block_scales(const uint8_t* unit, int blocks, bool has_m, float zero, float* scale16, float* bias16) {
  const __m256i words = block_words<Bytes>(unit, blocks, 0);
  const __m256 d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(words));
  const __m256 bias = has_m ? _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(words, 16)))
                            : _mm256_mul_ps(_mm256_set1_ps(-zero), d);
  // Each block's values for its two 16-groups.
  const __m512i groups = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  _mm512_store_ps(scale16, _mm512_permutexvar_ps(groups, _mm512_castps256_ps512(d)));
  _mm512_store_ps(bias16, _mm512_permutexvar_ps(groups, _mm512_castps256_ps512(bias)));
}

// 4-bit formats also name, for the fp32 engine's table lookups, the two 16-byte nibble runs
// of chunk c (for the 32-weight formats, run i is block 2c + i's codes). The 32-weight
// ones also say where their fp16 fields are: d first, then m if kHasM (else the bias is
// -kZero * d).
struct Q4_0Blocks {
  static constexpr int kWeights = 32, kBytes = 18, kUnitBlocks = 8;
  static constexpr bool kHasM = false;
  static constexpr float kZero = 8.0f;
  static const uint8_t* run(const uint8_t* u, int c, int i) { return u + (2 * c + i) * kBytes + 2; }
  static void scales(const uint8_t* u, int blocks, float* s, float* z) {
    block_scales<kBytes>(u, blocks, kHasM, kZero, s, z);
  }
  static __m512i codes(const uint8_t* u, int c, bool half) {
    return block_pair_nibbles(u + 2 * c * kBytes + 2, u + (2 * c + 1) * kBytes + 2, half);
  }
};

struct Q4_1Blocks {
  static constexpr int kWeights = 32, kBytes = 20, kUnitBlocks = 8;
  static constexpr bool kHasM = true;
  static constexpr float kZero = 0.0f;
  static const uint8_t* run(const uint8_t* u, int c, int i) { return u + (2 * c + i) * kBytes + 4; }
  static void scales(const uint8_t* u, int blocks, float* s, float* z) {
    block_scales<kBytes>(u, blocks, kHasM, kZero, s, z);
  }
  static __m512i codes(const uint8_t* u, int c, bool half) {
    return block_pair_nibbles(u + 2 * c * kBytes + 4, u + (2 * c + 1) * kBytes + 4, half);
  }
};

// The fifth bit of weight j of a block is bit j of its 32-bit qh.
inline __m512i with_fifth_bits(__m512i nibbles, const uint8_t* qh0, const uint8_t* qh1, bool half) {
  const uint64_t bits = load_u32(qh0) | (half ? 0ull : static_cast<uint64_t>(load_u32(qh1)) << 32);
  return _mm512_mask_add_epi8(nibbles, _cvtu64_mask64(bits), nibbles, _mm512_set1_epi8(16));
}

struct Q5_0Blocks {
  static constexpr int kWeights = 32, kBytes = 22, kUnitBlocks = 8;
  static void scales(const uint8_t* u, int blocks, float* s, float* z) {
    block_scales<kBytes>(u, blocks, false, 16.0f, s, z);
  }
  static __m512i codes(const uint8_t* u, int c, bool half) {
    const uint8_t* b0 = u + 2 * c * kBytes;
    const uint8_t* b1 = b0 + kBytes;
    return with_fifth_bits(block_pair_nibbles(b0 + 6, b1 + 6, half), b0 + 2, b1 + 2, half);
  }
};

struct Q5_1Blocks {
  static constexpr int kWeights = 32, kBytes = 24, kUnitBlocks = 8;
  static void scales(const uint8_t* u, int blocks, float* s, float* z) {
    block_scales<kBytes>(u, blocks, true, 0.0f, s, z);
  }
  static __m512i codes(const uint8_t* u, int c, bool half) {
    const uint8_t* b0 = u + 2 * c * kBytes;
    const uint8_t* b1 = b0 + kBytes;
    return with_fifth_bits(block_pair_nibbles(b0 + 8, b1 + 8, half), b0 + 4, b1 + 4, half);
  }
};

// Codes q + 128 (bias -128 d), so every format's codes are unsigned.
struct Q8_0Blocks {
  static constexpr int kWeights = 32, kBytes = 34, kUnitBlocks = 8;
  static void scales(const uint8_t* u, int blocks, float* s, float* z) {
    block_scales<kBytes>(u, blocks, false, 128.0f, s, z);
  }
  static __m512i codes(const uint8_t* u, int c, bool half) {
    const uint8_t* b0 = u + 2 * c * kBytes + 2;
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0));
    const __m256i q1 = half ? _mm256_setzero_si256() : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + kBytes));
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    const __m512i codes = _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
    return half ? _mm512_maskz_mov_epi8(0xffffffffull, codes) : codes;
  }
};

// The eight 6-bit scales and mins of a Q4_K / Q5_K super-block (12 bytes at q), each
// written twice (one per 16-group): scale16 = d * sc, bias16 = -(dmin * m).
inline void k_quant_scales(const uint8_t* q, float d, float dmin, float* s, float* z) {
  const uint32_t a0 = load_u32(q), a1 = load_u32(q + 4), b = load_u32(q + 8);
  const uint32_t sc_lo = a0 & 0x3f3f3f3fu, m_lo = a1 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (b & 0x0f0f0f0fu) | (((a0 >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((b >> 4) & 0x0f0f0f0fu) | (((a1 >> 6) & 0x03030303u) << 4);
  const __m128i sc = _mm_cvtsi64_si128(static_cast<int64_t>(sc_lo | static_cast<uint64_t>(sc_hi) << 32));
  const __m128i m = _mm_cvtsi64_si128(static_cast<int64_t>(m_lo | static_cast<uint64_t>(m_hi) << 32));
  const __m512 scf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sc, sc)));
  const __m512 mf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(m, m)));
  _mm512_store_ps(s, _mm512_mul_ps(_mm512_set1_ps(d), scf));
  const __m512 dm = _mm512_mul_ps(_mm512_set1_ps(dmin), mf);
  _mm512_store_ps(z, _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dm), _mm512_set1_epi32(INT32_MIN))));
}

// 64 weights of a K super-block from 32 nibble bytes: low nibbles first, then high.
inline __m512i split_nibbles(const uint8_t* q32) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q32));
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
  return _mm512_and_si512(z, nibble_mask());
}

struct Q4_KBlocks {
  static constexpr int kWeights = 256, kBytes = 144, kUnitBlocks = 1;
  static const uint8_t* run(const uint8_t* u, int c, int i) { return u + 16 + 32 * c + 16 * i; }
  static void scales(const uint8_t* u, int, float* s, float* z) { k_quant_scales(u + 4, half_at(u), half_at(u + 2), s, z); }
  static __m512i codes(const uint8_t* u, int c, bool) { return split_nibbles(u + 16 + 32 * c); }
};

// `bits` of each byte of 32 bytes, shifted right by a and by b for the two halves, masked.
inline __m512i high_bits(const uint8_t* h32, int a, int b, int mask) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h32));
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srl_epi16(h, _mm_cvtsi32_si128(a))),
                                       _mm256_srl_epi16(h, _mm_cvtsi32_si128(b)), 1);
  return _mm512_slli_epi16(_mm512_and_si512(z, _mm512_set1_epi8(static_cast<char>(mask))), 4);
}

// Chunk c: weights 64c + l take bit 2c of qh[l] as their fifth bit, 64c + 32 + l bit 2c + 1.
struct Q5_KBlocks {
  static constexpr int kWeights = 256, kBytes = 176, kUnitBlocks = 1;
  static void scales(const uint8_t* u, int, float* s, float* z) { k_quant_scales(u + 4, half_at(u), half_at(u + 2), s, z); }
  static __m512i codes(const uint8_t* u, int c, bool) {
    return _mm512_or_si512(split_nibbles(u + 48 + 32 * c), high_bits(u + 16, 2 * c, 2 * c + 1, 1));
  }
};

// Each 128-weight half: ql (64 bytes) low nibbles for weights 0-63, high nibbles for
// 64-127; qh (32 bytes) two bits a weight, 0-1 / 2-3 / 4-5 / 6-7 for its four runs of 32.
struct Q6_KBlocks {
  static constexpr int kWeights = 256, kBytes = 210, kUnitBlocks = 1;
  static void scales(const uint8_t* u, int, float* s, float* z) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u + 192));
    const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(half_at(u + 208)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
    _mm512_store_ps(s, scale);
    _mm512_store_ps(z, _mm512_mul_ps(_mm512_set1_ps(-32.0f), scale));
  }
  static __m512i codes(const uint8_t* u, int c, bool) {
    const int half = c / 2, upper = c % 2;
    const __m512i ql = _mm512_loadu_si512(u + 64 * half);
    const __m512i low = _mm512_and_si512(upper ? _mm512_srli_epi16(ql, 4) : ql, nibble_mask());
    return _mm512_or_si512(low, high_bits(u + 128 + 32 * half, 4 * upper, 4 * upper + 2, 3));
  }
};

}  // namespace
}  // namespace clika_kernels

// Each format's 256 codes of a unit in the unit engines' lane order (avx512_units.h),
// straight from the stored bytes: chunk j, 128-bit block i, 32-bit lane d holds the codes
// of weights 64d + 16i + 4j .. 64d + 16i + 4j + 3, so lane 4i + d of every chunk belongs
// to the 16-group 4d + i. avx512_records.cpp lays the activations out the same
// way. Per chunk, a permute or two gathers the 32-bit words that hold those weights and
// shifts and masks pick their bits; a short last unit (fewer than 8 blocks of 32) has zero
// codes past its blocks.
// Included after each engine's target options, so it compiles for that ISA.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "avx512_decode.h"

namespace clika_kernels {
namespace {

inline __m512i words_plus(__m512i base, int j) { return _mm512_add_epi32(base, _mm512_set1_epi32(j)); }

// c[j] (block i, lane d) <- c[d] (block i, lane j): a 4x4 transpose within 128-bit blocks.
[[gnu::always_inline]] inline void to_lane_order(__m512i* c) {
  const __m512i t0 = _mm512_unpacklo_epi32(c[0], c[1]);
  const __m512i t1 = _mm512_unpackhi_epi32(c[0], c[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(c[2], c[3]);
  const __m512i t3 = _mm512_unpackhi_epi32(c[2], c[3]);
  c[0] = _mm512_unpacklo_epi64(t0, t2);
  c[1] = _mm512_unpackhi_epi64(t0, t2);
  c[2] = _mm512_unpacklo_epi64(t1, t3);
  c[3] = _mm512_unpackhi_epi64(t1, t3);
}

// The `Run` (16 or 32) bytes at `at` of each of a unit's blocks of `Bytes`, block b at
// bytes Run * b.. of out (Run * 8 bytes in all), zero past the last block.
template <int Bytes, int Run>
[[gnu::always_inline]] inline void block_runs(const uint8_t* unit, int blocks, int at, __m512i* out) {
  const uint8_t* p = unit + at;
  // Masked loads read nothing past the last block (and cannot fault there).
  auto live16 = [blocks](int b) { return static_cast<__mmask16>(b < blocks ? 0xffff : 0); };
  auto live32 = [blocks](int b) { return static_cast<__mmask32>(b < blocks ? 0xffffffffu : 0); };
  if (Run == 16) {
    _Pragma("GCC unroll 2") for (int r = 0; r < 2; ++r) {
      const uint8_t* q = p + 4 * r * Bytes;
      const int b = 4 * r;
      __m512i z = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(live16(b), q));
      z = _mm512_inserti32x4(z, _mm_maskz_loadu_epi8(live16(b + 1), q + Bytes), 1);
      z = _mm512_inserti32x4(z, _mm_maskz_loadu_epi8(live16(b + 2), q + 2 * Bytes), 2);
      out[r] = _mm512_inserti32x4(z, _mm_maskz_loadu_epi8(live16(b + 3), q + 3 * Bytes), 3);
    }
  } else {
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; ++r) {
      const uint8_t* q = p + 2 * r * Bytes;
      const __m256i lo = _mm256_maskz_loadu_epi8(live32(2 * r), q);
      out[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_maskz_loadu_epi8(live32(2 * r + 1), q + Bytes), 1);
    }
  }
}

// 4-bit 32-weight blocks: weight 16h + 4j + b of block B is nibble h of its run's byte
// 4j + b, so lane (i, d) takes word j of block 2d + i / 2's run, nibble i % 2.
[[gnu::always_inline]] inline void nibble_block_codes(const __m512i* runs, __m512i* out) {
  const __m512i base = _mm512_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24, 4, 12, 20, 28, 4, 12, 20, 28);
  const __m512i shifts = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
  _Pragma("GCC unroll 4") for (int j = 0; j < 4; ++j) {
    const __m512i words = _mm512_permutex2var_epi32(runs[0], words_plus(base, j), runs[1]);
    out[j] = _mm512_and_si512(_mm512_srlv_epi32(words, shifts), nibble_mask());
  }
}

// Q5_0 / Q5_1: the fifth bit of weight t of block B is bit t of its 32-bit qh; lane
// (i, d) byte b of chunk j is weight 16(i % 2) + 4j + b of block 2d + i / 2.
template <int Bytes>
[[gnu::always_inline]] inline void add_fifth_bits(const uint8_t* unit, int blocks, int at, __m512i* codes) {
  const __m512i qh = _mm512_castsi256_si512(block_words<Bytes>(unit, blocks, at));
  const __m512i lanes_qh =
      _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7), qh);
  const __m512i first = _mm512_setr_epi32(0, 0, 0, 0, 16, 16, 16, 16, 0, 0, 0, 0, 16, 16, 16, 16);
  // Bits 0-3 of each lane to its bytes 0-3: the lane's low byte to all four, then bit b of byte b.
  const __m512i low_byte = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0x00000000);
  const __m512i bit_of_byte = _mm512_set1_epi32(0x08040201);
  _Pragma("GCC unroll 4") for (int j = 0; j < 4; ++j) {
    const __m512i bits = _mm512_srlv_epi32(lanes_qh, words_plus(first, 4 * j));
    const __mmask64 set = _mm512_test_epi8_mask(_mm512_shuffle_epi8(bits, low_byte), bit_of_byte);
    codes[j] = _mm512_mask_add_epi8(codes[j], set, codes[j], _mm512_set1_epi8(16));
  }
}

// Per unit, the weight scale of each lane's group (lane 4i + d: group 4d + i) and the
// bias of each 16-group in group order (the order of the activations' group sums).
template <class Format>
[[gnu::always_inline]] inline void group_lane_scales(const uint8_t* u, int blocks, __m512* lane_scale, __m512* bias) {
  alignas(64) float scale16[kMaxUnitGroups];
  alignas(64) float bias16[kMaxUnitGroups];
  Format::scales(u, blocks, scale16, bias16);
  const __m512i lane_groups = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  *lane_scale = _mm512_permutexvar_ps(lane_groups, _mm512_load_ps(scale16));
  *bias = _mm512_load_ps(bias16);
}

// 32-weight blocks: the fp16 d (and m right after it) at each block's start, converted
// at once as 16 floats [d0, m0, d1, m1, ..]; lane 4i + d scales block 2d + i / 2 and
// 16-group g belongs to block g / 2. Symmetric formats take the bias -zero * d.
template <int Bytes, bool HasM>
[[gnu::always_inline]] inline void block_lane_scales(const uint8_t* u, int blocks, float zero, __m512* lane_scale,
                                                     __m512* bias) {
  const __m512 dm = _mm512_cvtph_ps(block_words<Bytes>(u, blocks, 0));
  const __m512i lane_d = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 2, 6, 10, 14, 2, 6, 10, 14);
  const __m512i group_d = _mm512_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
  *lane_scale = _mm512_permutexvar_ps(lane_d, dm);
  if (HasM) {
    *bias = _mm512_permutexvar_ps(_mm512_add_epi32(group_d, _mm512_set1_epi32(1)), dm);
  } else {
    *bias = _mm512_mul_ps(_mm512_set1_ps(-zero), _mm512_permutexvar_ps(group_d, dm));
  }
}

template <class Format>
struct LaneCodes;

template <>
struct LaneCodes<Q4_0Blocks> {
  [[gnu::always_inline]] static void scales(const uint8_t* u, int blocks, __m512* s, __m512* z) {
    block_lane_scales<18, false>(u, blocks, 8.0f, s, z);
  }
  [[gnu::always_inline]] static void decode(const uint8_t* u, int blocks, __m512i* out) {
    __m512i runs[2];
    block_runs<18, 16>(u, blocks, 2, runs);
    nibble_block_codes(runs, out);
  }
};

template <>
struct LaneCodes<Q4_1Blocks> {
  [[gnu::always_inline]] static void scales(const uint8_t* u, int blocks, __m512* s, __m512* z) {
    block_lane_scales<20, true>(u, blocks, 0.0f, s, z);
  }
  [[gnu::always_inline]] static void decode(const uint8_t* u, int blocks, __m512i* out) {
    __m512i runs[2];
    block_runs<20, 16>(u, blocks, 4, runs);
    nibble_block_codes(runs, out);
  }
};

template <>
struct LaneCodes<Q5_0Blocks> {
  [[gnu::always_inline]] static void scales(const uint8_t* u, int blocks, __m512* s, __m512* z) {
    block_lane_scales<22, false>(u, blocks, 16.0f, s, z);
  }
  [[gnu::always_inline]] static void decode(const uint8_t* u, int blocks, __m512i* out) {
    __m512i runs[2];
    block_runs<22, 16>(u, blocks, 6, runs);
    nibble_block_codes(runs, out);
    add_fifth_bits<22>(u, blocks, 2, out);
  }
};

template <>
struct LaneCodes<Q5_1Blocks> {
  [[gnu::always_inline]] static void scales(const uint8_t* u, int blocks, __m512* s, __m512* z) {
    block_lane_scales<24, true>(u, blocks, 0.0f, s, z);
  }
  [[gnu::always_inline]] static void decode(const uint8_t* u, int blocks, __m512i* out) {
    __m512i runs[2];
    block_runs<24, 16>(u, blocks, 8, runs);
    nibble_block_codes(runs, out);
    add_fifth_bits<24>(u, blocks, 4, out);
  }
};

// Q8_0: word w of block B is word 16d + 4i + j of the unit's runs for lane (i, d) when
// w = 4(i % 2) + j and B = 2d + i / 2, so register d of the runs holds lane d's words:
// the in-block transpose; codes q + 128.
template <>
struct LaneCodes<Q8_0Blocks> {
  [[gnu::always_inline]] static void scales(const uint8_t* u, int blocks, __m512* s, __m512* z) {
    block_lane_scales<34, false>(u, blocks, 128.0f, s, z);
  }
  [[gnu::always_inline]] static void decode(const uint8_t* u, int blocks, __m512i* out) {
    block_runs<34, 32>(u, blocks, 2, out);
    to_lane_order(out);
    for (int j = 0; j < 4; ++j) out[j] = _mm512_xor_si512(out[j], _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

// Q4_K: weights 64d + 32h + l are nibble h of nibble byte 32d + l, so lane (i, d) takes
// word 8d + 4(i % 2) + j of the 128 nibble bytes, nibble i / 2.
[[gnu::always_inline]] inline void k_nibble_codes(const uint8_t* qs, __m512i* out) {
  const __m512i q0 = _mm512_loadu_si512(qs);
  const __m512i q1 = _mm512_loadu_si512(qs + 64);
  const __m512i base = _mm512_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28, 0, 8, 16, 24, 4, 12, 20, 28);
  const __m512i shifts = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
  _Pragma("GCC unroll 4") for (int j = 0; j < 4; ++j) {
    const __m512i words = _mm512_permutex2var_epi32(q0, words_plus(base, j), q1);
    out[j] = _mm512_and_si512(_mm512_srlv_epi32(words, shifts), nibble_mask());
  }
}

template <>
struct LaneCodes<Q4_KBlocks> {
  [[gnu::always_inline]] static void scales(const uint8_t* u, int blocks, __m512* s, __m512* z) {
    group_lane_scales<Q4_KBlocks>(u, blocks, s, z);
  }
  [[gnu::always_inline]] static void decode(const uint8_t* u, int, __m512i* out) { k_nibble_codes(u + 16, out); }
};

// Q5_K: the fifth bit of weight 64d + 32h + l is bit 2d + h of qh byte l: word
// 4(i % 2) + j of qh, bit 2d + i / 2 of each byte.
template <>
struct LaneCodes<Q5_KBlocks> {
  [[gnu::always_inline]] static void scales(const uint8_t* u, int blocks, __m512* s, __m512* z) {
    group_lane_scales<Q5_KBlocks>(u, blocks, s, z);
  }
  [[gnu::always_inline]] static void decode(const uint8_t* u, int, __m512i* out) {
    k_nibble_codes(u + 48, out);
    const __m512i qh = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 16)));
    const __m512i base = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7);
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; ++j) {
      const __m512i words = _mm512_permutexvar_epi32(words_plus(base, j), qh);
      const __m512i bit = _mm512_and_si512(_mm512_srlv_epi32(words, shifts), _mm512_set1_epi8(1));
      out[j] = _mm512_or_si512(out[j], _mm512_slli_epi32(bit, 4));
    }
  }
};

// Q6_K: weight 64d + 16i + 4j + b is in half d / 2 and quarter q = 2(d % 2) + i / 2 of it:
// its low 4 bits are nibble d % 2 of ql word 16(d / 2) + 4i + j, its high 2 bits bits
// 2q.. of qh word 8(d / 2) + 4(i % 2) + j.
template <>
struct LaneCodes<Q6_KBlocks> {
  [[gnu::always_inline]] static void scales(const uint8_t* u, int blocks, __m512* s, __m512* z) {
    group_lane_scales<Q6_KBlocks>(u, blocks, s, z);
  }
  [[gnu::always_inline]] static void decode(const uint8_t* u, int, __m512i* out) {
    const __m512i ql0 = _mm512_loadu_si512(u);
    const __m512i ql1 = _mm512_loadu_si512(u + 64);
    const __m512i qh = _mm512_loadu_si512(u + 128);
    const __m512i low_base = _mm512_setr_epi32(0, 0, 16, 16, 4, 4, 20, 20, 8, 8, 24, 24, 12, 12, 28, 28);
    const __m512i low_shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i high_base = _mm512_setr_epi32(0, 0, 8, 8, 4, 4, 12, 12, 0, 0, 8, 8, 4, 4, 12, 12);
    const __m512i high_shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 2, 6, 2, 6, 2, 6, 2, 6);
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; ++j) {
      const __m512i low = _mm512_permutex2var_epi32(ql0, words_plus(low_base, j), ql1);
      const __m512i high = _mm512_permutexvar_epi32(words_plus(high_base, j), qh);
      const __m512i lo4 = _mm512_and_si512(_mm512_srlv_epi32(low, low_shifts), nibble_mask());
      const __m512i hi2 = _mm512_and_si512(_mm512_srlv_epi32(high, high_shifts), _mm512_set1_epi8(3));
      out[j] = _mm512_or_si512(lo4, _mm512_slli_epi32(hi2, 4));
    }
  }
};

}  // namespace
}  // namespace clika_kernels

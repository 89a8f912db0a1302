// Internal to engine/kernels: the fixed-point input of the integer Q4G
// product in groups of 128, the layout that matvec_avx2.cc and
// matvec_avx512.cc each write and read (README.md, "The trunk's Q4G
// product"). Each of them includes this and gets its own copy: everything
// here is a plain struct or has internal linkage (static), so no inline
// function compiled with one file's -m flags can be kept for the other.
#pragma once

#include <cstdint>

#include "engine/kernels/matvec.h"

namespace waste::kernels::q4fixed {

// Rows wider than this take the float path (MatVec's stack buffer).
static constexpr int64_t kMaxGroups = 16384 / 128;

// Signed bytes a column: kExact 3 (m = d0 + 256 d1 + 65536 d2), kInt8 1.
static constexpr int Digits(Q4Input in) {
  return in == Q4Input::kInt8 ? 1 : 3;
}

// An input in fixed point, laid out flat (64-aligned), per 128-column group g:
//   digits [g][digit k][64 even columns, then 64 odd]: d_k of m for column
//          128 g + 2 j + (0 even, 1 odd) at [g][k][64 * odd + j];
//   bias   [g][lane]: -8 * sum of m over columns 8 lane .. 8 lane + 7 of the
//          group, lane in [0, 16);
//   unit   kExact [g]: what one step of m is worth, 2^(e-21);
//          kInt8 [g][lane]: the step of the 32 columns lane belongs to
//          (4 lanes a step).
struct FixedInput {
  int8_t* digits;  // [groups][digits][128]
  int32_t (*bias)[16];
  float* unit;
};

static constexpr int64_t GroupBytes(int digits) {
  return digits * 128 + 16 * 4 + (digits == 1 ? 16 * 4 : 4);
}

// Bytes of one input's fixed point, a multiple of 64.
static constexpr int64_t Bytes(int64_t cols, Q4Input in) {
  return (cols / 128 * GroupBytes(Digits(in)) + 63) / 64 * 64;
}

static inline FixedInput At(uint8_t* base, int64_t groups, int digits) {
  return {reinterpret_cast<int8_t*>(base),
          reinterpret_cast<int32_t (*)[16]>(base + groups * digits * 128),
          reinterpret_cast<float*>(base + groups * (digits * 128 + 64))};
}

// The AMX product (matvec_amx.cc) lays each tile of up to 16 inputs out
// as its B tiles want them: per group, digits [3][2][16][width][4] bytes,
// then 8 * sum of each digit [3][16] int32 and the steps [16] floats.
// AmxTileBytes is one tile's, a multiple of 64; a pass over the rows takes
// up to kAmxTokensAPass inputs (its accumulators stay on the stack): one
// tile `n` wide for n <= 16, else tiles 16 wide. AmxScratchBytes is what a
// call with n inputs needs beside them.
static constexpr int64_t kAmxTokensAPass = 64;
static constexpr int64_t AmxTileBytes(int64_t groups, int64_t width) {
  return groups * (3 * 2 * 16 * 4 * width + 3 * 16 * 4 + 16 * 4);
}
static constexpr int64_t AmxScratchBytes(int64_t cols, int64_t n) {
  return n <= 16 ? AmxTileBytes(cols / 128, n)
                 : (n < kAmxTokensAPass ? n + 15 : kAmxTokensAPass) / 16 *
                       AmxTileBytes(cols / 128, 16);
}

}  // namespace waste::kernels::q4fixed

// The scalar reference dequantization of GGUF's tensor types: ggml's block
// layouts (ggml-common.h) decoded to float32 in the arithmetic the `gguf`
// package's quants.py uses (every product and sum in float32, in its
// order), so the values equal the package's bit for bit
// (tests/gguf_test.cc, on fixtures from tools/gguf/make_fixtures.py). The
// products of gguf_matvec.h decode the same values.
//
// Read: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ1_S, IQ1_M. Every other type (TQ, Q8_K, integers) is refused by
// name.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/gguf/gguf.h"

namespace waste::kernels {

// True for the types GgufDequantize reads.
bool GgufDequantizes(uint32_t type);

// Decodes `bytes`, whole blocks of ggml type `type`, into `out`, which
// holds exactly their values. An error (naming the type) for a type not
// read or sizes that are not whole blocks.
Status GgufDequantize(uint32_t type, std::span<const uint8_t> bytes, std::span<float> out);

// A whole tensor of `g`, read and decoded; errors name the tensor.
Result<std::vector<float>> GgufDequantizeTensor(const gguf::Gguf& g, const gguf::TensorInfo& t);

// The factored types: every quantized type read here (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4 and the
// grid types IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M), whose
// value j of a block is, in the package's arithmetic,
//   a[j / 16] * float(q[j])               (less b[j / 16]
//   where GgufFactorsHaveOffset: Q4_1, Q5_1, Q2_K, Q4_K, Q5_K)
// with q[j] an integer code in int8 (IQ4_NL's and IQ4_XS's level, MXFP4's
// E2M1 value doubled, a grid type's grid value with its sign: the
// package's (a * grid) * sign is a * (sign * grid), bit for bit; IQ1's
// 8 (grid + delta), with a = dl / 8) and a, b the block's factors per 16
// values, each computed once in float32 from its f16 and 4-8 bit scales
// (Q4_1's and Q5_1's b is their min negated: v - (-m) is v + m, bit for
// bit).
bool GgufFactored(uint32_t type);
bool GgufFactorsHaveOffset(uint32_t type);
// A factored type's factors of one block: a[0 : values / 16] and, with an
// offset, b[0 : values / 16] (b untouched otherwise). `type` must be factored.
void GgufBlockFactors(uint32_t type, const uint8_t* block, float* a, float* b);
// A factored type's codes of one block, q[0 : values], in scalar code (the
// SIMD paths' for the grid types, whose codes are table lookups).
void GgufBlockCodes(uint32_t type, const uint8_t* block, int8_t* q);

// IQ4_NL's and IQ4_XS's sixteen levels (ggml-common.h kvalues_iq4nl) and
// E2M1's values doubled (MXFP4 multiplies them by half its E8M0 scale).
extern const int8_t kGgufIq4Levels[16];
extern const int8_t kGgufE2m1Doubled[16];

}  // namespace waste::kernels

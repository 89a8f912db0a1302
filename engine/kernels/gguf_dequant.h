// The scalar reference dequantization of GGUF's tensor types: ggml's block
// layouts (ggml-common.h) decoded to float32 in the arithmetic the `gguf`
// package's quants.py uses (every product and sum in float32, in its
// order), so the values equal the package's bit for bit
// (tests/gguf_test.cc, on fixtures from tools/gguf/make_fixtures.py). SIMD
// kernels for these types will be checked against these functions.
//
// Read: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4. Every other type (the 1-3 bit IQ
// types, TQ, Q8_K, integers) is refused by name.
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

}  // namespace waste::kernels

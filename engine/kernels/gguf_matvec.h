// Products straight from GGUF blocks: a matrix of ggml's row-major blocks
// times one input (a token) or several (a prefill chunk), for every type
// gguf_dequant.h reads: its factored types (Q4_K, Q5_K, Q6_K, Q8_0, Q2_K,
// Q3_K, IQ4_XS, MXFP4, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ3_XXS, IQ3_S,
// IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M)
// and F32, F16, BF16.
//
// Activations stay float32. Each weight is the value GgufDequantize gives
// (the `gguf` package's, bit for bit) and is multiplied by the float input.
// llama.cpp instead rounds the input to Q8_K (int8 with one float scale per
// 256 values; Q8_0 or Q8_1 per 32 for the 32-value types) and sums integer
// products per sub-block before scaling: its result differs from this one
// by that rounding of the input, about 2^-8 of each 256 inputs' largest
// magnitude, where this product's only rounding is float32's. For F16 and
// BF16 weights it rounds the input to that type (2^-11, 2^-8 of each input).
//
// The order, which every Isa reproduces bit for bit (so switching paths
// never moves a logit): per row, 64 lanes, column c in lane c % 64; from
// 0.f, in ascending c,
//   acc[c % 64] = acc[c % 64] + w[c] * x[c]
// (a float multiply then a float add, never fused); then the lanes summed
// as a tree: i with i + 32, then i with i + 16, + 8, + 4, + 2, and 0 with
// 1. A row is computed whole by one call, and a token's bits do not depend
// on the other tokens of its chunk.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "engine/kernels/cpu.h"

namespace waste::kernels {

// A row-major matrix of GGUF blocks: row r is cols / block values' blocks
// at data + r * row bytes, as ggml stores a tensor (and an expert's slice of
// a merged tensor). Not owning; any alignment.
struct GgufMatrixView {
  uint32_t type = 0;  // ggml type code
  const uint8_t* data = nullptr;
  int64_t bytes = 0;  // readable at data: at least rows * row bytes
  int64_t rows = 0, cols = 0;
};

// True for the types these products read.
bool GgufMatVecSupports(uint32_t type);

// The bytes of one row of `w` (its type supported here).
int64_t GgufRowBytes(const GgufMatrixView& w);

// Ok, or an error naming the type (not read here) or the shape (cols not
// whole blocks, negative sizes, more bytes than `bytes`).
Status CheckGgufMatrix(const GgufMatrixView& w);

// y[r] = sum_c W[r][c] * x[c] for r in [row_begin, row_end); writes only
// those y[r]. x: [cols]. `w` must pass CheckGgufMatrix. `isa` is lowered to
// what the CPU supports.
void GgufMatVec(const GgufMatrixView& w, const float* x, float* y, int64_t row_begin,
                int64_t row_end, Isa isa);

// The chunk product: ys[t][r] = W[r] . xs[t] for every input t and r in
// [row_begin, row_end), each row's blocks decoded once for all inputs (up
// to 64 at a time; a longer chunk decodes them once per 64). Each ys[t] is
// the bits of GgufMatVec(w, xs[t], ys[t], ...). Outputs must not overlap
// the inputs.
void GgufMatMul(const GgufMatrixView& w, std::span<const float* const> xs,
                std::span<float* const> ys, int64_t row_begin, int64_t row_end, Isa isa);

}  // namespace waste::kernels

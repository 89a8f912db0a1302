// The INT4 expert record's matrix-vector product, straight from its bytes:
// compressed-tensors' pack-quantized codes two per byte (low nibble first,
// the signed value plus 8), one bf16 scale per group of 32 values of a row
// (engine/format/encoding.h defines both).
//
// Every Isa gives the scalar reference's bits, so that switching paths never
// moves a logit. The reference's order is mxfp4.h's: per row, 16 lanes, lane
// l taking columns l and l + 16 of each group of 32; for group b with scale s,
//   p = w[32b + l] * x[32b + l] + w[32b + 16 + l] * x[32b + 16 + l]
//   acc[l] = acc[l] + p * s
// (w the integer code - 8; each a float multiply or add, never fused), then
// the lanes summed as a tree: i with i + 8, then i with i + 4, then i with
// i + 2, then 0 with 1. A row is computed whole by one call, so the row range
// a thread takes changes nothing.
#pragma once

#include <cstdint>

#include "engine/kernels/cpu.h"

namespace waste::kernels {

// A row-major INT4 matrix. Not owning; any alignment.
struct Int4MatrixView {
  const uint8_t* codes = nullptr;   // [rows][cols / 2]
  const uint8_t* scales = nullptr;  // [rows][cols / 32], bf16 (little-endian, unaligned)
  int64_t rows = 0, cols = 0;       // cols a multiple of 32
};

// y[r] = sum_c W[r][c] * x[c] for r in [row_begin, row_end); writes only
// those y[r]. x: [cols]. `isa` is lowered to what the CPU supports.
void Int4MatVec(const Int4MatrixView& w, const float* x, float* y, int64_t row_begin,
                int64_t row_end, Isa isa);

}  // namespace waste::kernels

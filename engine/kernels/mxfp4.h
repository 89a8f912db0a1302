// The MXFP4 expert record's matrix-vector product, straight from its bytes:
// E2M1 codes two per byte (low nibble first), one E8M0 scale per block of
// 32 values of a row (engine/format/encoding.h defines both).
//
// Every Isa gives the scalar reference's bits, so that switching paths never
// moves a logit. The reference's order: per row, 16 lanes, lane l taking
// columns l and l + 16 of each block of 32; for block b with scale s,
//   p = w[32b + l] * x[32b + l] + w[32b + 16 + l] * x[32b + 16 + l]
//   acc[l] = acc[l] + p * s
// (each a float multiply or add, never fused; a weight times 2^k is exact),
// then the lanes summed as a tree: i with i + 8, then i with i + 4, then
// i with i + 2, then 0 with 1. A row is computed whole by one call, so the
// row range a thread takes changes nothing.
#pragma once

#include <cstdint>

#include "engine/kernels/cpu.h"

namespace waste::kernels {

// A row-major MXFP4 matrix. Not owning; any alignment.
struct Mxfp4MatrixView {
  const uint8_t* codes = nullptr;   // [rows][cols / 2]
  const uint8_t* scales = nullptr;  // [rows][cols / 32], E8M0
  int64_t rows = 0, cols = 0;       // cols a multiple of 32
};

// y[r] = sum_c W[r][c] * x[c] for r in [row_begin, row_end); writes only
// those y[r]. x: [cols]. `isa` is lowered to what the CPU supports.
void Mxfp4MatVec(const Mxfp4MatrixView& w, const float* x, float* y, int64_t row_begin,
                 int64_t row_end, Isa isa);

}  // namespace waste::kernels

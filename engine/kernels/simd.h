// Internal to engine/kernels: the entry points of the AVX2 and AVX-512
// translation units (matvec_avx2.cc, vq_avx2.cc, recurrence_avx2.cc,
// nearest_avx2.cc, mxfp4_avx2.cc, int4_avx2.cc, gguf_matvec_avx2.cc, matvec_avx512.cc,
// vq_avx512.cc, recurrence_avx512.cc, nearest_avx512.cc, mxfp4_avx512.cc, int4_avx512.cc,
// gguf_matvec_avx512.cc), which are
// compiled with their own -m
// flags. Call them only after UsableIsa() said the CPU has the instructions.
//
// Each returns false, having written nothing, for a shape it does not
// cover; the caller then falls back to the next lower path.
//
// Those files use nothing inline or templated from other headers (the
// standard library included), only intrinsics, C functions and their own
// internal-linkage helpers: an inline function shared with baseline code and
// emitted there with -mavx512f could be the copy the linker keeps, and would
// then run on CPUs without AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kernels/gguf_matvec.h"
#include "engine/kernels/int4.h"
#include "engine/kernels/matvec.h"
#include "engine/kernels/mxfp4.h"
#include "engine/kernels/q4_fixed.h"
#include "engine/kernels/recurrence.h"
#include "engine/kernels/vq.h"

namespace waste::kernels {

// gguf_matvec.h's products decode a row's blocks this many values at a time.
constexpr int kGgufPiece = 256;

// GgufRowLanes (both paths): row r of a GGUF matrix (CheckGgufMatrix ok)
// against n inputs, each input's 64 lane sums of gguf_matvec.h's order, before
// the tree, into acc[t * 64 : t * 64 + 64]; false for a type the path does not
// read.

namespace avx2 {
bool MatVec(const MatrixView& w, const float* x, float* y, int64_t row_begin, int64_t row_end);
// avx512's Q4FixInput and Q4FixedRows below on AVX2's integer products.
bool Q4FixInput(const float* x, int64_t cols, Q4Input in, uint8_t* fixed);
void Q4FixedRows(const MatrixView& w, Q4Input in, const q4fixed::FixedInput* fixed,
                 float* const* ys, size_t n, int64_t row_begin, int64_t row_end);
// Fills lut[0 : (cols/8) * stages * entries] (not the padding).
void VqBuildLut(const float* const* codebooks, int stages, int entries, const float* x,
                int64_t cols, float* lut);
bool VqApply(const VqMatrixView& m, const float* lut, float* y, int64_t row_begin, int64_t row_end);
// matvec.h's WeightedRows, the scalar reference's bits; grouped formats need
// group % 8 == 0.
bool WeightedRows(const MatrixView& w, int64_t first_row, const float* a, int64_t n_rows, float* y);
// recurrence.h's loops, the scalar reference's bits; KdaStateStep needs d % 8 == 0,
// GatedDeltaStateStep dv % 8 == 0.
bool KdaStateStep(float* S, int d, const float* decay, const float* k, const float* v, float b,
                  const float* q, float* u, float* o);
bool GatedDeltaStateStep(float* S, int dk, int dv, float decay, const float* k, const float* v,
                         float b, const float* q, float* u, float* o);
bool WeightedRowSum(const float* a, const float* rows, int64_t n_rows, int64_t stride, int64_t cols,
                    float* y);
// NearestEntry (nearest.h) over its lane layout of 8 entries a chunk.
void NearestEntries(const float* lanes_books, const float* lanes_norms, int chunks, const float* x,
                    int64_t n, int32_t* out);
// mxfp4.h's product, the scalar reference's bits; needs cols % 32 == 0.
bool Mxfp4MatVec(const Mxfp4MatrixView& w, const float* x, float* y, int64_t row_begin,
                 int64_t row_end);
// int4.h's product, the scalar reference's bits; needs cols % 32 == 0.
bool Int4MatVec(const Int4MatrixView& w, const float* x, float* y, int64_t row_begin,
                int64_t row_end);
bool GgufRowLanes(const GgufMatrixView& w, int64_t r, const float* const* xs, int n, float* acc);
}  // namespace avx2

namespace avx512 {
// MatVec's paths but the fixed-point Q4G product, which matvec.cc runs in
// two steps so that one input's fixed point serves many calls:
bool MatVec(const MatrixView& w, const float* x, float* y, int64_t row_begin, int64_t row_end);
// Writes x in fixed point (q4_fixed.h; q4fixed::Bytes(cols, in) bytes,
// 64-aligned) and returns false where it cannot be (README.md; cols % 128
// != 0 included): the float path then runs.
bool Q4FixInput(const float* x, int64_t cols, Q4Input in, uint8_t* fixed);
// Rows [row_begin, row_end) of a Q4G matrix of group 128 against n inputs
// in fixed point, into ys[i]; several inputs share each group's load and
// nibble split, and each input's bits are those it has alone.
void Q4FixedRows(const MatrixView& w, Q4Input in, const q4fixed::FixedInput* fixed,
                 float* const* ys, size_t n, int64_t row_begin, int64_t row_end);
void VqBuildLut(const float* const* codebooks, int stages, int entries, const float* x,
                int64_t cols, float* lut);
bool VqApply(const VqMatrixView& m, const float* lut, float* y, int64_t row_begin, int64_t row_end);
// The quantized table (vq.h); the same bytes and bits as vq.cc's scalar twin.
void VqQuantizeLut(const float* lut, int64_t cols, int stages, int entries, int index_bits,
                   uint8_t* qlut);
bool VqApplyQ(const VqMatrixView& m, const uint8_t* qlut, float* y, int64_t row_begin,
              int64_t row_end);
// The float table split into byte planes (vq.h); VqApply's bits.
void VqSplitLut(const float* lut, int64_t cols, int stages, int entries, uint8_t* planes);
// VqSplitLut of VqBuildLut's table for 256 entries, without the float table.
void VqBuildSplitLut(const float* const* codebooks, int stages, const float* x, int64_t cols,
                     uint8_t* planes);
bool VqApplySplit(const VqMatrixView& m, const uint8_t* planes, float* y, int64_t row_begin,
                  int64_t row_end);
// VqQuantizeLut of VqBuildLut's table, a scale group at a time (vq.h).
void VqBuildQLut(const float* const* codebooks, int stages, int entries, int index_bits,
                 const float* x, int64_t cols, uint8_t* qlut);
// matvec.h's WeightedRows, the scalar reference's bits; grouped formats need
// group % 16 == 0.
bool WeightedRows(const MatrixView& w, int64_t first_row, const float* a, int64_t n_rows, float* y);
// recurrence.h's loops, the scalar reference's bits; KdaStateStep needs d % 16 == 0,
// GatedDeltaStateStep dv % 16 == 0.
bool KdaStateStep(float* S, int d, const float* decay, const float* k, const float* v, float b,
                  const float* q, float* u, float* o);
bool GatedDeltaStateStep(float* S, int dk, int dv, float decay, const float* k, const float* v,
                         float b, const float* q, float* u, float* o);
bool WeightedRowSum(const float* a, const float* rows, int64_t n_rows, int64_t stride, int64_t cols,
                    float* y);
// NearestEntry (nearest.h) over its lane layout of 16 entries a chunk.
void NearestEntries(const float* lanes_books, const float* lanes_norms, int chunks, const float* x,
                    int64_t n, int32_t* out);
bool Mxfp4MatVec(const Mxfp4MatrixView& w, const float* x, float* y, int64_t row_begin,
                 int64_t row_end);
bool Int4MatVec(const Int4MatrixView& w, const float* x, float* y, int64_t row_begin,
                int64_t row_end);
bool GgufRowLanes(const GgufMatrixView& w, int64_t r, const float* const* xs, int n, float* acc);
}  // namespace avx512

namespace amx {
// The exact Q4G product in groups of 128 on AMX-INT8 tiles (matvec_amx.cc):
// rows [row_begin, row_end) against n inputs put in fixed point by
// avx512::Q4FixInput (Q4Input::kExact), into ys[i]. scratch: 64-aligned,
// q4fixed::AmxScratchBytes(w.cols, n) bytes. The calling thread must have the
// tile state (cpu.cc asks Linux for it when it finds AMX).
void Q4FixedRows(const MatrixView& w, const q4fixed::FixedInput* fixed, float* const* ys, size_t n,
                 int64_t row_begin, int64_t row_end, uint8_t* scratch);
}  // namespace amx

}  // namespace waste::kernels

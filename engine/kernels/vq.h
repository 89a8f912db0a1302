// The routed experts' matrix-vector product without dequantizing: the
// lookup-table method. A VQ weight row is, per 8-wide vector position v,
// the sum over stages of one codebook entry each, times the row's scale. So
//   dot(W[r], x) = scale[r] * sum_v sum_s dot(codebook[s][index(r,v,s)], x[8v:8v+8])
// and the inner dot depends only on (v, s, entry), never on the row:
// VqBuildLut tabulates it once per input vector (shared by every expert of
// a layer, since the codebooks are per layer and matrix), and VqApply then
// costs `stages` table lookups per 8 weights. docs/FORMAT.md, "Expert
// records", has the index layout.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kernels/cpu.h"

namespace waste::kernels {

// One matrix (gate, up or down) of an expert record. Not owning.
struct VqMatrixView {
  // The matrix's index region: blocked [row_block][v][row_in_block][bytes_per_vector]
  // with rows padded to whole blocks, or [row][v][bytes_per_vector] when
  // index_block is 0. bytes_per_vector is `stages` (index_bits 8) or 3
  // (index_bits 6: VQ4P, four 6-bit indices, format::UnpackVq4).
  const uint8_t* indices = nullptr;
  const uint8_t* scales = nullptr;  // [rows] f16 row scales, raw bytes, any alignment
  int64_t rows = 0, cols = 0;       // cols % 8 == 0
  // From ExpertQuant. stages 1..8, entries 1..256; index_bits 8, or 6 with
  // stages 4 and entries <= 64; index_block 0 or a multiple of 16 (64 in
  // practice).
  int stages = 3, entries = 256, index_bits = 8, index_block = 64;
};

// Floats the table for `cols` inputs needs: (cols / 8) * stages * entries,
// plus 256 - entries of zero padding when entries < 256, so an index byte
// >= entries (only in a damaged record) reads a value of another table or
// zero, never memory outside the table.
size_t VqLutFloats(int64_t cols, int stages, int entries);

// lut[v][s][e] = dot(codebooks[s][e * 8 : e * 8 + 8], x[8v : 8v + 8]) for
// v < cols / 8, s < stages, e < entries, then the zero padding.
// codebooks: [stages] pointers, each at [entries][8] floats
// (Container::Codebook(base + matrix * stages + s)). x: [cols], cols % 8 == 0.
// lut: [VqLutFloats(cols, stages, entries)]. `isa` as for VqApply.
void VqBuildLut(const float* const* codebooks, int stages, int entries, const float* x,
                int64_t cols, float* lut, Isa isa);

// y[r] = f16(scale[r]) * sum_v sum_s lut[v][s][index(r, v, s)] for r in
// [row_begin, row_end); writes only those y[r]. lut: as VqBuildLut made it
// for m.cols, m.stages, m.entries. y: [m.rows] (absolute row index).
// 0 <= row_begin <= row_end <= m.rows. Accumulates in float32, each row's
// terms in v-then-s order on every path. `isa` is lowered to what the CPU
// supports; a layout a SIMD path does not cover (index_block 0) runs scalar.
// Safe to call concurrently on disjoint row ranges.
void VqApply(const VqMatrixView& m, const float* lut, float* y, int64_t row_begin, int64_t row_end,
             Isa isa);

// ---- The float table split into byte planes (exact) ----
//
// Gathers are VqApply's whole cost with AVX-512 on this machine. Split into
// four byte planes (byte p of every float of a (v, stage) table, 256 bytes
// each), the table is looked up 64 rows at a time with byte permutes like
// the int8 table below, and the floats rebuilt from their bytes are added
// in VqApply's order: the same bits as VqApply.

// Bytes VqSplitLut writes for `cols` inputs: (cols / 8) * stages * 4 * 256.
size_t VqSplitLutBytes(int64_t cols, int stages);

// planes[((v * stages + s) * 4 + p) * 256 + e] = byte p (little-endian) of
// lut[(v * stages + s) * entries + e] for e < 256, reading past `entries`
// into the next table or the padding exactly as VqApply does for a damaged
// index. lut: as VqBuildLut made it; index_bits 8 only. The bytes do not
// depend on `isa`.
void VqSplitLut(const float* lut, int64_t cols, int stages, int entries, uint8_t* planes, Isa isa);

// VqSplitLut(VqBuildLut's table): the same bytes, computed a (v, stage)
// table at a time and split at once, so that no float table the size of
// the whole (884 KiB for VQ3R's gate at the 48B shapes) is written and read
// back; in the model that round trip went to memory and made the tables
// 3x slower than in a benchmark. planes: [VqSplitLutBytes(cols, stages)].
void VqBuildSplitLut(const float* const* codebooks, int stages, int entries, const float* x,
                     int64_t cols, uint8_t* planes, Isa isa);

// Whether VqApplySplit uses the planes for matrices of this quantization on
// `isa` (AVX-512, index_bits 8, index_block 64); when not, splitting is
// wasted work.
bool VqSplitCovers(int index_bits, int index_block, Isa isa);

// VqApply(m, lut, ...), bit for bit, using `planes` (VqSplitLut of `lut`)
// where VqSplitCovers and `lut` otherwise (also when `planes` is null).
void VqApplySplit(const VqMatrixView& m, const float* lut, const uint8_t* planes, float* y,
                  int64_t row_begin, int64_t row_end, Isa isa);

// ---- The quantized table (an option: not exact) ----
//
// The same product from an int8 copy of the table, which AVX-512 VBMI looks
// up 64 rows at a time with byte permutes instead of gathering floats. Per
// group of kVqGroup vector positions the table shares one float scale,
//   scale_g = max |lut| over the group / 127,  q = round(lut / scale_g),
// stored biased as q + 128 in a byte, and a row's integer sum over the
// group is exact, so the product is
//   y[r] = f16(scale[r]) * sum_g scale_g * (sum over the group's v, s of q),
// the groups added in order with fused multiply-adds. Every path computes
// exactly that, so all give the same bits from the same table (the scalar
// path is the SIMD paths' twin, not an approximation of them). It differs
// from VqApply by the table's rounding: docs/log/2026-11-30-issues-6-to-9.md, "accuracy of
// the int8 table", has the logit error it causes.

// Which table the routed experts' products use: the exact float table
// (VqApply) or its int8 copy (VqApplyQ).
enum class VqTable { kF32, kI8 };

// Vector positions (8 inputs each) per scale group.
inline constexpr int kVqGroup = 8;

// Bytes of the quantized table for `cols` inputs: the group scales
// ([ceil(cols / 8 / kVqGroup)] floats), then [cols / 8][stages][E] biased
// bytes, E = 64 for index_bits 6 and 256 for index_bits 8 (entries past
// `entries` hold the value 0, so a damaged index reads 0, never memory
// outside the table).
size_t VqQLutBytes(int64_t cols, int stages, int index_bits);

// Quantizes `lut` (as VqBuildLut made it for cols, stages, entries) into
// `qlut` ([VqQLutBytes(cols, stages, index_bits)] bytes, any alignment).
// entries <= 64 when index_bits is 6. Same bytes on every path; NaNs in
// `lut` become -127 and an infinite group maximum gives that group scale
// inf and q 0 (the result is then NaN, as the float path's would be).
void VqQuantizeLut(const float* lut, int64_t cols, int stages, int entries, int index_bits,
                   uint8_t* qlut, Isa isa);

// VqQuantizeLut(VqBuildLut's table): the same bytes, built a scale group
// (kVqGroup vector positions) at a time through a float table of one group,
// so that the whole float table is never written and read back (as
// VqBuildSplitLut does for the exact planes). qlut: [VqQLutBytes(cols,
// stages, index_bits)] bytes, any alignment.
void VqBuildQLut(const float* const* codebooks, int stages, int entries, int index_bits,
                 const float* x, int64_t cols, uint8_t* qlut, Isa isa);

// y[r] = the product above for r in [row_begin, row_end); otherwise as
// VqApply, with a table from VqQuantizeLut for m's cols, stages, entries and
// index_bits. The AVX-512 path needs VBMI and index_block 64; every other
// case (AVX2 included) runs the scalar twin.
void VqApplyQ(const VqMatrixView& m, const uint8_t* qlut, float* y, int64_t row_begin,
              int64_t row_end, Isa isa);

}  // namespace waste::kernels

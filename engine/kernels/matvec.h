// Matrix-vector products over the trunk's stored formats, straight from the
// container's bytes (no dequantized copy): F32, F16, BF16, Q8G, Q4G, Q3G as
// engine/format/encoding.h defines them and docs/FORMAT.md lists them.
#pragma once

#include <cstdint>
#include <span>

#include "engine/format/layout.h"
#include "engine/kernels/cpu.h"

namespace waste::kernels {

class ThreadPool;

// A row-major matrix as stored in trunk.bin. Not owning.
struct MatrixView {
  format::Fmt fmt = format::Fmt::kF32;  // kF32, kF16, kQ8G, kQ4G or kQ3G
  bool bf16 = false;                    // kF16 only: the halves are bfloat16
  int64_t rows = 0, cols = 0;
  int group = 0;  // grouped formats (Q8G, Q4G, Q3G): values per scale, >= 1
  // [rows][row_bytes]: MatrixRowBytes(*this) bytes per row. Any alignment.
  const uint8_t* payload = nullptr;
  // Grouped formats: [rows][groups_per_row] f16 scales, groups_per_row =
  // ceil(cols / group). Any alignment (read with memcpy or unaligned loads,
  // never dereferenced as uint16_t). Unused otherwise.
  const uint16_t* scales = nullptr;
};

// How the SIMD Q4G products in groups of 128 (AVX2 and AVX-512) put each
// input in fixed point (q4_fixed.h, README.md). kExact: 24 bits a group, within 2^-23 of the
// group's largest |x|, held to the float product's tolerance; the default.
// kInt8: 8 bits, a step of largest / 127 per 32 columns, as llama.cpp's
// Q8_0 activations: a third of the integer arithmetic and not exact (its
// perplexity and KL on the demo model: docs/log/2026-12-03-to-04.md, "int8
// inputs"). Every other format and the scalar path ignore it.
enum class Q4Input : uint8_t { kExact, kInt8 };

// Bytes of one row of payload: cols * 4 (F32), cols * 2 (F16/BF16), or the
// grouped row size of format::GroupedShape (rows padded to whole groups,
// Q3G with its guard byte).
int64_t MatrixRowBytes(const MatrixView& w);
// Bytes a whole product reads of the matrix: its payload and, for the
// grouped formats, its scales.
int64_t MatrixBytes(const MatrixView& w);

// y[r] = sum_c W[r][c] * x[c] for r in [row_begin, row_end); writes only
// those y[r]. x: [cols], y: [rows] (indexed by absolute row).
// 0 <= row_begin <= row_end <= rows. Accumulates in float32; the SIMD paths
// differ from the scalar one by summation order, and their Q4G paths in
// groups of 128 also by rounding x to fixed point per group (2^-23 of the
// group's largest |x|, or as `in` says; README.md). `isa` is lowered to
// what the CPU supports (UsableIsa); a shape a SIMD path does not cover (a
// group that is not a multiple of 8 or 16) runs on the next lower path.
// Safe to call concurrently on disjoint row ranges.
void MatVec(const MatrixView& w, const float* x, float* y, int64_t row_begin, int64_t row_end,
            Isa isa, Q4Input in = Q4Input::kExact);

// One product of MatVecs: y = W x, every row. x: [w->cols], y: [w->rows].
struct MatVecJob {
  const MatrixView* w = nullptr;
  const float* x = nullptr;
  float* y = nullptr;
};

// Every job's product in one pool.ParallelFor, so one barrier instead of
// one per matrix. The jobs' rows, laid end to end, are cut into chunks
// (multiples of `grain`, as ParallelFor cuts) that may begin and end
// inside any matrix; each chunk calls MatVec on its row range of every
// matrix it touches. A row is computed by one MatVec call whatever the
// range around it, so the results are the bits of one MatVec(job, 0, rows)
// per job, for any thread count. Jobs may share inputs; outputs must not
// overlap one another or the inputs. Matrices of zero rows are allowed.
void MatVecs(ThreadPool& pool, std::span<const MatVecJob> jobs, int64_t grain, Isa isa,
             Q4Input in = Q4Input::kExact);

// MatVecs with several inputs a matrix: each job's rows applied to each of
// its inputs (ys[i] = W xs[i]), every job in one pool.ParallelFor cut as
// MatVecs cuts, each chunk's rows of a job applied to all its inputs by
// MatVecBlocks (blocks of `grain`). Each ys[i] is the bits of one MatVec
// over the whole matrix. Outputs must not overlap one another or the inputs.
struct MatVecManyJob {
  const MatrixView* w = nullptr;
  std::span<const float* const> xs;
  std::span<float* const> ys;
};
void MatVecsMany(ThreadPool& pool, std::span<const MatVecManyJob> jobs, int64_t grain, Isa isa,
                 Q4Input in = Q4Input::kExact);

// ys[i][r] = W[r] . xs[i] for r in [row_begin, row_end) and every input,
// on the calling thread: the rows in blocks of `block`, each applied to
// every input while it is in cache, and each input put in the kernels' form
// once for the call (the SIMD Q4G products' fixed point), not once a
// block. Each ys[i] gets the bits of MatVec(w, xs[i], ys[i], row_begin,
// row_end, isa). xs and ys as MatVecMany's.
void MatVecBlocks(const MatrixView& w, std::span<const float* const> xs,
                  std::span<float* const> ys, int64_t row_begin, int64_t row_end, int64_t block,
                  Isa isa, Q4Input in = Q4Input::kExact);

// One matrix times several inputs: ys[i] = W xs[i], every row, in one
// pool.ParallelFor. Each thread takes its rows in blocks of `grain` and
// applies a block to every input in turn while the block's bytes are in
// cache, so W comes from memory about once for all the inputs. Each ys[i]
// is the bits of MatVec(w, xs[i], ys[i], 0, rows) (a row is computed by
// one MatVec call whatever the range around it). xs[i]: [cols], ys[i]:
// [rows]; outputs must not overlap one another or the inputs.
void MatVecMany(ThreadPool& pool, const MatrixView& w, std::span<const float* const> xs,
                std::span<float* const> ys, int64_t grain, Isa isa, Q4Input in = Q4Input::kExact);

// y[c] = sum over r in [0, n_rows) of a[r] * W[first_row + r][c], for c in
// [0, cols), each weight decoded as DequantRow decodes it. Each sum runs
// over r in ascending order from 0.f, a multiply then an add, so every Isa
// gives the bits of DequantRow followed by WeightedRowSum (recurrence.h).
// MLA's query in latent space: q_nope through a head's key rows of
// kv_b_proj, read in place. a: [n_rows], y: [cols].
// 0 <= first_row <= first_row + n_rows <= rows.
void WeightedRows(const MatrixView& w, int64_t first_row, const float* a, int64_t n_rows, float* y,
                  Isa isa);

// Row `row` of W decoded to floats exactly as encoding.h defines it
// (scale * q for grouped formats). out: [cols]. Scalar.
void DequantRow(const MatrixView& w, int64_t row, float* out);

}  // namespace waste::kernels

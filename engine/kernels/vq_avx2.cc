// The VQ lookup-table kernels with AVX2 + FMA + F16C. Compiled with
// -mavx2 -mfma -mf16c; see simd.h for what this file may use.
//
// VqApply works on 8 rows at a time, up to four such chunks per pass (half
// an index block of 64 rows), 8 table values a stage and chunk. A pass
// covers a span of kSpanVectors vector positions, and every row of a
// segment (up to kSegmentRows rows) takes that span before any takes the
// next: the span's slice of the table stays in L1 while it is read from,
// where a whole table (a few hundred KB) would be swept from L2 or L3 once
// per pass. Between spans a row's running sum waits in a scratch array, so
// each row still adds its terms in v-then-s order. 8-bit indices read the
// table with scalar loads; VQ4P's 6-bit ones gather (its 64-entry tables
// do not fit AVX2's 16 registers).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/kernels/simd.h"

namespace waste::kernels::avx2 {
namespace {

// ---- VqBuildLut ----
//
// Entries are the lanes: 8 entries of a codebook are transposed once into
// eight registers (one per dimension, by gathers), then every vector
// position costs eight FMAs against broadcast inputs and one store. The
// dimensions are added in order 0..7, as the scalar loop does.

void BuildStageChunk(const float* cb, int count, const float* x, int64_t nv, int64_t stride,
                     float* out) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane);
  const __m256i rows = _mm256_slli_epi32(lane, 3);
  __m256 dim[8];
  for (int d = 0; d < 8; ++d)
    dim[d] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), cb + d, rows, _mm256_castsi256_ps(k), 4);
  for (int64_t v = 0; v < nv; ++v, x += 8, out += stride) {
    __m256 acc = _mm256_mul_ps(_mm256_broadcast_ss(x), dim[0]);
    for (int d = 1; d < 8; ++d) acc = _mm256_fmadd_ps(_mm256_broadcast_ss(x + d), dim[d], acc);
    if (count == 8) {
      _mm256_storeu_ps(out, acc);
    } else {
      _mm256_maskstore_ps(out, k, acc);  // microcoded and slow on AMD: tails only
    }
  }
}

// ---- VqApply ----

// Vector positions per span (3 KB of VQ3R's table each) and rows per
// segment (the scratch of running sums: 4 KB; a larger index block, never
// written by the converters, runs scalar).
constexpr int64_t kSpanVectors = 8;
constexpr int64_t kSegmentRows = 1024;

struct Pass {
  const VqMatrixView* m;
  const float* lut;
  float* y;
  int64_t block;           // index block number
  int64_t first;           // row in the block where chunk 0 starts, a multiple of 8
  int64_t lo, hi;          // the rows to write, relative to the block
  int64_t v_begin, v_end;  // the span of vector positions
  float* sums;             // running sums of the chunks' rows (8 per chunk)
};

// A chunk's running sum: zero before the first span, else what the last
// span left.
__m256 Start(const Pass& p, int c) {
  return p.v_begin == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(p.sums + 8 * c);
}

// After the last span, applies the row scales to the sums and stores the
// chunk's rows inside [lo, hi); before it, keeps the sums for the next span.
void Finish(const Pass& p, int c, __m256 sum) {
  if (p.v_end < p.m->cols / 8) {
    _mm256_storeu_ps(p.sums + 8 * c, sum);
    return;
  }
  const int64_t start = p.first + 8 * c;  // relative to the block
  const int64_t a = p.lo > start ? p.lo - start : 0;
  const int64_t b = p.hi < start + 8 ? p.hi - start : 8;
  const int64_t row = p.block * p.m->index_block + start;
  alignas(16) uint16_t halves[8] = {};
  std::memcpy(halves + a, p.m->scales + 2 * (row + a), static_cast<size_t>(b - a) * 2);
  const __m256 scaled =
      _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(halves))), sum);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i keep =
      _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int>(a) - 1)),
                       _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(b)), lane));
  if (a == 0 && b == 8) {
    _mm256_storeu_ps(p.y + row, scaled);
  } else {
    _mm256_maskstore_ps(p.y + row, keep, scaled);  // microcoded and slow on AMD: edges only
  }
}

// 8-bit indices: 8 rows' table values are fetched with scalar loads and
// packed into a register, not gathered: on an AMD Zen 1 that is 2.1-2.2x
// the gather (vq_bench, docs/log/2026-12-05.md, "VQ on AVX2 without gathers"). The
// values and the order of the adds are the gather's, so are the bits.
template <int S, int N>
void LookupPass(const Pass& p) {
  const VqMatrixView& m = *p.m;
  const int64_t nv = m.cols / 8, block = m.index_block, entries = m.entries;
  __m256 acc[N];
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) acc[c] = Start(p, c);
  const uint8_t* idx = m.indices + ((p.block * nv + p.v_begin) * block + p.first) * S;
  for (int64_t v = p.v_begin; v < p.v_end; ++v, idx += block * S) {
    const float* table = p.lut + v * S * entries;
#pragma GCC unroll 4
    for (int c = 0; c < N; ++c) {
      const uint8_t* q = idx + 8 * S * c;  // row j's byte s at q[j * S + s]
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        const float* t = table + s * entries;
        acc[c] =
            _mm256_add_ps(acc[c], _mm256_setr_ps(t[q[s]], t[q[S + s]], t[q[2 * S + s]],
                                                 t[q[3 * S + s]], t[q[4 * S + s]], t[q[5 * S + s]],
                                                 t[q[6 * S + s]], t[q[7 * S + s]]));
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) Finish(p, c, acc[c]);
}

// VQ4P: 8 rows' 3-byte groups, bytes [0, 16) in the low lane and [8, 24) in
// the high one; dword j gets row j's (row 4 + j's) three bytes.
struct Spread {
  alignas(32) uint8_t bytes[32];
};
constexpr Spread MakeSpread() {
  Spread s{};
  for (int j = 0; j < 4; ++j) {
    for (int k = 0; k < 3; ++k) {
      s.bytes[4 * j + k] = static_cast<uint8_t>(3 * j + k);
      s.bytes[16 + 4 * j + k] = static_cast<uint8_t>(4 + 3 * j + k);
    }
    s.bytes[4 * j + 3] = s.bytes[16 + 4 * j + 3] = 0x80;
  }
  return s;
}
constexpr Spread kSpread = MakeSpread();

template <int N>
void PackedGatherPass(const Pass& p) {
  const VqMatrixView& m = *p.m;
  const int64_t nv = m.cols / 8, block = m.index_block, entries = m.entries;
  const __m256i spread = _mm256_load_si256(reinterpret_cast<const __m256i*>(kSpread.bytes));
  const __m256i six_bits = _mm256_set1_epi32(63);
  __m256 acc[N];
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) acc[c] = Start(p, c);
  const uint8_t* idx = m.indices + ((p.block * nv + p.v_begin) * block + p.first) * 3;
  for (int64_t v = p.v_begin; v < p.v_end; ++v, idx += block * 3) {
    const float* table = p.lut + v * 4 * entries;
#pragma GCC unroll 4
    for (int c = 0; c < N; ++c) {
      const uint8_t* q = idx + 24 * c;
      const __m256i packed =
          _mm256_shuffle_epi8(_mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(q + 8),
                                                  reinterpret_cast<const __m128i*>(q)),
                              spread);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const __m256i e = _mm256_and_si256(_mm256_srli_epi32(packed, 6 * s), six_bits);
        acc[c] = _mm256_add_ps(acc[c], _mm256_i32gather_ps(table + s * entries, e, 4));
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) Finish(p, c, acc[c]);
}

using PassFn = void (*)(const Pass&);

template <int S>
constexpr PassFn kLookupPasses[4] = {&LookupPass<S, 1>, &LookupPass<S, 2>, &LookupPass<S, 3>,
                                     &LookupPass<S, 4>};
constexpr PassFn kPackedPasses[4] = {&PackedGatherPass<1>, &PackedGatherPass<2>,
                                     &PackedGatherPass<3>, &PackedGatherPass<4>};

PassFn PassFor(const VqMatrixView& m, int chunks) {
  if (m.index_bits == 6) return kPackedPasses[chunks - 1];
  switch (m.stages) {
    case 1:
      return kLookupPasses<1>[chunks - 1];
    case 2:
      return kLookupPasses<2>[chunks - 1];
    case 3:
      return kLookupPasses<3>[chunks - 1];
    case 4:
      return kLookupPasses<4>[chunks - 1];
    case 5:
      return kLookupPasses<5>[chunks - 1];
    case 6:
      return kLookupPasses<6>[chunks - 1];
    case 7:
      return kLookupPasses<7>[chunks - 1];
    default:
      return kLookupPasses<8>[chunks - 1];
  }
}

}  // namespace

void VqBuildLut(const float* const* codebooks, int stages, int entries, const float* x,
                int64_t cols, float* lut) {
  const int64_t stride = static_cast<int64_t>(stages) * entries;  // floats per vector position
  for (int s = 0; s < stages; ++s)
    for (int e = 0; e < entries; e += 8)
      BuildStageChunk(codebooks[s] + 8 * e, entries - e < 8 ? entries - e : 8, x, cols / 8, stride,
                      lut + static_cast<int64_t>(s) * entries + e);
}

bool VqApply(const VqMatrixView& m, const float* lut, float* y, int64_t row_begin,
             int64_t row_end) {
  const int64_t block = m.index_block;
  if (block <= 0 || block % 8 != 0 || block > kSegmentRows) return false;
  if (m.index_bits == 6 ? m.stages != 4 || m.entries > 64
                        : m.index_bits != 8 || m.stages < 1 || m.stages > 8)
    return false;
  const int64_t nv = m.cols / 8;
  const int64_t segment_blocks = kSegmentRows / block;
  float sums[kSegmentRows];
  for (int64_t b0 = row_begin / block; b0 * block < row_end; b0 += segment_blocks) {
    for (int64_t v0 = 0; v0 < nv; v0 += kSpanVectors) {
      const int64_t v1 = v0 + kSpanVectors < nv ? v0 + kSpanVectors : nv;
      for (int64_t b = b0; b < b0 + segment_blocks && b * block < row_end; ++b) {
        const int64_t base = b * block;
        const int64_t lo = (row_begin > base ? row_begin : base) - base;
        const int64_t hi = (row_end < base + block ? row_end : base + block) - base;
        for (int64_t first = lo / 8 * 8; first < hi;) {
          const int64_t left = (hi - first + 7) / 8;
          const int chunks = static_cast<int>(left < 4 ? left : 4);
          float* at = sums + (b - b0) * block + first;
          PassFor(m, chunks)(Pass{&m, lut, y, b, first, lo, hi, v0, v1, at});
          first += 8 * chunks;
        }
      }
    }
  }
  return true;
}

}  // namespace waste::kernels::avx2

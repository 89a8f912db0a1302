// The VQ lookup-table kernels with AVX2 + FMA + F16C. Compiled with
// -mavx2 -mfma -mf16c; see simd.h for what this file may use.
//
// VqApply works on 8 rows at a time with 8-wide gathers, up to four such
// chunks per pass (half an index block of 64 rows), one gather per stage
// and chunk. A pass covers a span of kSpanVectors vector positions, and
// every row of a segment (up to kSegmentRows rows) takes that span before
// any takes the next: the span's slice of the table stays in L1 while it
// is gathered from, where a whole table (a few hundred KB) would be swept
// from L2 or L3 once per pass. Between spans a row's running sum waits in
// a scratch array, so each row still adds its terms in v-then-s order.
// VQ4P's 64-entry tables do not fit AVX2's 16 registers, so it gathers too.
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
  int64_t block;         // index block number
  int64_t first;         // row in the block where chunk 0 starts, a multiple of 8
  int64_t lo, hi;        // the rows to write, relative to the block
  int64_t v_begin, v_end;  // the span of vector positions
  float* sums;           // running sums of the chunks' rows (8 per chunk)
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

// pshufb controls for S in 2..4: a chunk's 8 rows of S bytes are loaded as
// bytes [0, 16) into the low lane and [8S - 16, 8S) into the high lane, so
// rows 4-7 start at byte 16 - 4S there. For stage s, byte 0 of dword j takes
// row j's (or row 4 + j's) byte s; 0x80 zeroes the rest.
template <int S>
struct StageControls {
  alignas(32) uint8_t bytes[S][32];
};
template <int S>
constexpr StageControls<S> MakeStageControls() {
  StageControls<S> c{};
  for (int s = 0; s < S; ++s) {
    for (int i = 0; i < 32; ++i) c.bytes[s][i] = 0x80;
    for (int j = 0; j < 4; ++j) {
      c.bytes[s][4 * j] = static_cast<uint8_t>(j * S + s);
      c.bytes[s][16 + 4 * j] = static_cast<uint8_t>(16 - 4 * S + j * S + s);
    }
  }
  return c;
}
template <int S>
constexpr StageControls<S> kStageControls = MakeStageControls<S>();

// The stage indices of 8 rows whose S index bytes each start at q.
template <int S>
struct Indices8 {
  __m256i lanes;  // the chunk's bytes arranged for the shuffles (2 <= S <= 4)
  const uint8_t* q;
  explicit Indices8(const uint8_t* at) : q(at) {
    if constexpr (S >= 2 && S <= 4)
      lanes = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(q + 8 * S - 16),
                                  reinterpret_cast<const __m128i*>(q));
    else
      lanes = _mm256_setzero_si256();
  }
  __m256i Stage(int s) const {
    if constexpr (S == 1) {
      return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
    } else if constexpr (S <= 4) {
      return _mm256_shuffle_epi8(
          lanes, _mm256_load_si256(reinterpret_cast<const __m256i*>(kStageControls<S>.bytes[s])));
    } else {
      return _mm256_setr_epi32(q[s], q[S + s], q[2 * S + s], q[3 * S + s], q[4 * S + s],
                               q[5 * S + s], q[6 * S + s], q[7 * S + s]);
    }
  }
};

template <int S, int N>
void GatherPass(const Pass& p) {
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
      const Indices8<S> in(idx + 8 * S * c);
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s)
        acc[c] = _mm256_add_ps(acc[c], _mm256_i32gather_ps(table + s * entries, in.Stage(s), 4));
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
constexpr PassFn kGatherPasses[4] = {&GatherPass<S, 1>, &GatherPass<S, 2>, &GatherPass<S, 3>,
                                     &GatherPass<S, 4>};
constexpr PassFn kPackedPasses[4] = {&PackedGatherPass<1>, &PackedGatherPass<2>,
                                     &PackedGatherPass<3>, &PackedGatherPass<4>};

PassFn PassFor(const VqMatrixView& m, int chunks) {
  if (m.index_bits == 6) return kPackedPasses[chunks - 1];
  switch (m.stages) {
    case 1:
      return kGatherPasses<1>[chunks - 1];
    case 2:
      return kGatherPasses<2>[chunks - 1];
    case 3:
      return kGatherPasses<3>[chunks - 1];
    case 4:
      return kGatherPasses<4>[chunks - 1];
    case 5:
      return kGatherPasses<5>[chunks - 1];
    case 6:
      return kGatherPasses<6>[chunks - 1];
    case 7:
      return kGatherPasses<7>[chunks - 1];
    default:
      return kGatherPasses<8>[chunks - 1];
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

// The VQ lookup-table kernels with AVX-512 (F, BW, VL, VBMI). Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vbmi -mavx2 -mfma -mf16c; see
// simd.h for what this file may use.
//
// VqApply works on 16 rows at a time, up to four such chunks (one 64-row
// index block) per pass over the vector positions, so a pass reads the
// block's indices front to back and keeps four accumulators in registers.
// 8-bit indices (VQ3R, VQ2R): one gather per stage and chunk, 256-entry
// tables being too big for registers. VQ4P: the four 64-entry tables of a
// vector position sit in 16 registers and two vpermt2ps plus a blend look
// 16 rows up at once, with no gather.

#include "engine/kernels/avx512_intrin.h"

#include <cstdint>

#include "engine/kernels/simd.h"

namespace waste::kernels::avx512 {
namespace {

// ---- VqBuildLut ----
//
// Entries are the lanes: 16 entries of a codebook are transposed once into
// eight registers (one per dimension, by gathers), then every vector
// position costs eight FMAs against broadcast inputs and one store. The
// dimensions are added in order 0..7, as the scalar loop does.

void BuildStageChunk(const float* cb, int count, const float* x, int64_t nv, int64_t stride,
                     float* out) {
  const __mmask16 k = static_cast<__mmask16>((1u << count) - 1u);
  const __m512i rows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(8));
  __m512 dim[8];
  for (int d = 0; d < 8; ++d)
    dim[d] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, rows, cb + d, 4);
  for (int64_t v = 0; v < nv; ++v, x += 8, out += stride) {
    __m512 acc = _mm512_mul_ps(_mm512_set1_ps(x[0]), dim[0]);
    for (int d = 1; d < 8; ++d) acc = _mm512_fmadd_ps(_mm512_set1_ps(x[d]), dim[d], acc);
    _mm512_mask_storeu_ps(out, k, acc);
  }
}

// ---- VqApply ----

// One pass over the vector positions for up to four 16-row chunks of one
// index block.
struct Pass {
  const VqMatrixView* m;
  const float* lut;
  float* y;
  int64_t block;      // index block number
  int64_t first;      // row in the block where chunk 0 starts, a multiple of 16
  __mmask16 rows[4];  // per chunk: the rows to write (inside the caller's range)
};

// Applies the row scales to the sums and stores the chunk's selected rows.
void Finish(const Pass& p, int c, __m512 sum) {
  const int64_t row = p.block * p.m->index_block + p.first + 16 * c;
  const __mmask16 k = p.rows[c];
  const __m512 scale = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p.m->scales + 2 * row));
  _mm512_mask_storeu_ps(p.y + row, k, _mm512_mul_ps(scale, sum));
}

// Byte controls for vpermb / vpermi2b: for stage s, byte 0 of dword j takes
// index byte j * S + s of the chunk (16 rows of S bytes); bytes 1-3 are
// zeroed by the kDwordLow mask.
template <int S>
struct StageControls {
  alignas(64) uint8_t bytes[S][64];
};
template <int S>
constexpr StageControls<S> MakeStageControls() {
  StageControls<S> c{};
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < 16; ++j) c.bytes[s][4 * j] = static_cast<uint8_t>(j * S + s);
  return c;
}
template <int S>
constexpr StageControls<S> kStageControls = MakeStageControls<S>();
constexpr __mmask64 kDwordLow = 0x1111111111111111ull;

// 8-bit indices, S stages: gathers.
template <int S, int N>
void GatherPass(const Pass& p) {
  const VqMatrixView& m = *p.m;
  const int64_t nv = m.cols / 8, block = m.index_block, entries = m.entries;
  const __mmask64 lo_bytes = S >= 4 ? ~0ull : (1ull << (16 * S)) - 1;
  const __mmask64 hi_bytes = S <= 4 ? 0 : S == 8 ? ~0ull : (1ull << (16 * S - 64)) - 1;
  __m512i ctrl[S];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) ctrl[s] = _mm512_load_si512(kStageControls<S>.bytes[s]);
  __m512 acc[N];
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) acc[c] = _mm512_setzero_ps();
  const uint8_t* idx = m.indices + (p.block * nv * block + p.first) * S;
  for (int64_t v = 0; v < nv; ++v, idx += block * S) {
    const float* table = p.lut + v * S * entries;
#pragma GCC unroll 4
    for (int c = 0; c < N; ++c) {
      const uint8_t* q = idx + 16 * S * c;
      const __m512i lo = _mm512_maskz_loadu_epi8(lo_bytes, q);
      const __m512i hi = S > 4 ? _mm512_maskz_loadu_epi8(hi_bytes, q + 64) : lo;
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) {
        const __m512i e = S > 4 ? _mm512_maskz_permutex2var_epi8(kDwordLow, lo, ctrl[s], hi)
                                : _mm512_maskz_permutexvar_epi8(kDwordLow, ctrl[s], lo);
        acc[c] = _mm512_add_ps(acc[c], _mm512_i32gather_ps(e, table + s * entries, 4));
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) Finish(p, c, acc[c]);
}

// VQ4P: four stages of at most 64 entries, indices packed 4 x 6 bits in 3
// bytes. The tables of a vector position are loaded into registers and
// looked up with permutes. Tables shorter than 64 entries read into the next
// table or the padding, which VqLutFloats provides.
constexpr uint8_t MakeSpreadByte(int i) {  // byte i of the vpermb control
  return static_cast<uint8_t>(3 * (i / 4) + (i % 4 == 3 ? 2 : i % 4));
}
struct Spread {
  alignas(64) uint8_t bytes[64];
};
constexpr Spread MakeSpread() {
  Spread s{};
  for (int i = 0; i < 64; ++i) s.bytes[i] = MakeSpreadByte(i);
  return s;
}
constexpr Spread kSpread = MakeSpread();

template <int N>
void PermutePass(const Pass& p) {
  const VqMatrixView& m = *p.m;
  const int64_t nv = m.cols / 8, block = m.index_block, entries = m.entries;
  const __m512i spread = _mm512_load_si512(kSpread.bytes);  // dword j = the 3 bytes of row j
  const __m512i bit5 = _mm512_set1_epi32(32);
  __m512 acc[N];
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) acc[c] = _mm512_setzero_ps();
  const uint8_t* idx = m.indices + (p.block * nv * block + p.first) * 3;
  for (int64_t v = 0; v < nv; ++v, idx += block * 3) {
    const float* table = p.lut + v * 4 * entries;
    __m512 t[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) t[k] = _mm512_loadu_ps(table + (k / 4) * entries + 16 * (k % 4));
#pragma GCC unroll 4
    for (int c = 0; c < N; ++c) {
      const __m512i packed =
          _mm512_permutexvar_epi8(spread, _mm512_maskz_loadu_epi8(0xffffffffffffull, idx + 48 * c));
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        // Bits 0-4 pick the entry inside a 32-entry half, bit 5 the half;
        // the permutes ignore the higher bits.
        const __m512i e = _mm512_srli_epi32(packed, 6 * s);
        const __mmask16 upper = _mm512_test_epi32_mask(e, bit5);
        const __m512 lower_half = _mm512_permutex2var_ps(t[4 * s], e, t[4 * s + 1]);
        const __m512 upper_half = _mm512_permutex2var_ps(t[4 * s + 2], e, t[4 * s + 3]);
        acc[c] = _mm512_add_ps(acc[c], _mm512_mask_blend_ps(upper, lower_half, upper_half));
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
constexpr PassFn kPermutePasses[4] = {&PermutePass<1>, &PermutePass<2>, &PermutePass<3>,
                                      &PermutePass<4>};

PassFn PassFor(const VqMatrixView& m, int chunks) {
  if (m.index_bits == 6) return kPermutePasses[chunks - 1];
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

// Lanes [a, b) of a 16-lane mask, clamped to [0, 16].
__mmask16 LaneRange(int64_t a, int64_t b) {
  a = a < 0 ? 0 : a;
  b = b > 16 ? 16 : b;
  if (b <= a) return 0;
  return static_cast<__mmask16>(((1u << b) - 1u) & ~((1u << a) - 1u));
}

}  // namespace

void VqBuildLut(const float* const* codebooks, int stages, int entries, const float* x,
                int64_t cols, float* lut) {
  const int64_t stride = static_cast<int64_t>(stages) * entries;  // floats per vector position
  for (int s = 0; s < stages; ++s)
    for (int e = 0; e < entries; e += 16)
      BuildStageChunk(codebooks[s] + 8 * e, entries - e < 16 ? entries - e : 16, x, cols / 8,
                      stride, lut + static_cast<int64_t>(s) * entries + e);
}

bool VqApply(const VqMatrixView& m, const float* lut, float* y, int64_t row_begin,
             int64_t row_end) {
  const int64_t block = m.index_block;
  if (block <= 0 || block % 16 != 0) return false;
  if (m.index_bits == 6 ? m.stages != 4 || m.entries > 64
                        : m.index_bits != 8 || m.stages < 1 || m.stages > 8)
    return false;
  for (int64_t b = row_begin / block; b * block < row_end; ++b) {
    const int64_t base = b * block;
    const int64_t lo = (row_begin > base ? row_begin : base) - base;
    const int64_t hi = (row_end < base + block ? row_end : base + block) - base;
    for (int64_t first = lo / 16 * 16; first < hi;) {
      const int64_t left = (hi - first + 15) / 16;
      const int chunks = static_cast<int>(left < 4 ? left : 4);
      Pass p{&m, lut, y, b, first, {}};
      for (int c = 0; c < chunks; ++c)
        p.rows[c] = LaneRange(lo - first - 16 * c, hi - first - 16 * c);
      PassFor(m, chunks)(p);
      first += 16 * chunks;
    }
  }
  return true;
}

}  // namespace waste::kernels::avx512

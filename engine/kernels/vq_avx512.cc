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
#include <vector>

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

// ---- VqQuantizeLut / VqApplyQ: the int8 table ----
//
// A 64-row index block's bytes for one vector position are S (stages)
// registers; byte permutes (vpermt2b, vpermb) de-interleave them into one
// register of 64 row indices per stage, and the stage's 256-byte table
// (four registers) is looked up with two vpermi2b and a blend on the index's
// top bit (VQ4P: its 64-entry tables need one vpermb). The 64 looked-up bytes
// are summed in 16-bit words without widening (see Accumulate) and turned
// into floats once per scale group.
//
// Lane L of a de-interleaved register holds row 16 * (L % 4) + L / 4 of the
// block, so that the group sums' dword lanes (Flush) come out as rows
// 0-15, 16-31, 32-47 and 48-63 in order.

constexpr int kQBlock = 64;  // rows per index block the int8 path covers

constexpr int LaneRow(int lane) {
  return 16 * (lane % 4) + lane / 4;
}

// Controls to gather stage s's bytes of a block of 64 rows x S bytes held in
// S registers: byte L names the source byte modulo 128, for a vpermt2b over
// the register pair it lies in (or a vpermb of a last, unpaired register);
// pair[p] marks the lanes whose byte lies in pair p.
template <int S>
struct Deinterleave {
  alignas(64) uint8_t ctrl[S][64];
  uint64_t pair[S][4];
};
template <int S>
constexpr Deinterleave<S> MakeDeinterleave(int (*row)(int)) {
  Deinterleave<S> d{};
  for (int s = 0; s < S; ++s)
    for (int lane = 0; lane < 64; ++lane) {
      const int byte = S * row(lane) + s;
      d.ctrl[s][lane] = static_cast<uint8_t>(byte % 128);
      d.pair[s][byte / 128] |= uint64_t{1} << lane;
    }
  return d;
}
template <int S>
constexpr Deinterleave<S> kDeinterleave = MakeDeinterleave<S>(&LaneRow);

// Stage s's 64 index bytes, in LaneRow order, from a block's S registers.
template <int S>
__m512i Gather(const __m512i* in, __m512i ctrl, const uint64_t* pair) {
  __m512i r =
      S == 1 ? _mm512_permutexvar_epi8(ctrl, in[0]) : _mm512_permutex2var_epi8(in[0], ctrl, in[1]);
#pragma GCC unroll 4
  for (int p = 1; 2 * p < S; ++p) {
    if (2 * p + 1 < S) {
      r = _mm512_mask_blend_epi8(pair[p], r,
                                 _mm512_permutex2var_epi8(in[2 * p], ctrl, in[2 * p + 1]));
    } else {
      r = _mm512_mask_permutexvar_epi8(r, pair[p], ctrl, in[2 * p]);
    }
  }
  return r;
}

// A 256-entry byte table (four registers) looked up by 64 indices.
__m512i Lookup256(const __m512i* table, __m512i idx) {
  const __m512i lower = _mm512_permutex2var_epi8(table[0], idx, table[1]);
  const __m512i upper = _mm512_permutex2var_epi8(table[2], idx, table[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lower, upper);
}

// The running sums of one block's group: 64 rows' biased bytes b = q + 128
// added as 16-bit words. `raw` adds the registers as they are (even rows in
// the low bytes, odd rows' bytes times 256 in the high ones), `odd` adds the
// odd rows' bytes alone; both wrap modulo 2^16. They start at values that
// cancel the bias of n terms, so that at the end
//   odd = sum of the odd rows' q,  raw - 256 * odd = sum of the even rows' q
// exactly, each at most 127 * n <= 32767 in magnitude.
struct GroupSums {
  __m512i raw, odd;
};
GroupSums StartGroup(int n) {
  const int odd0 = -128 * n;
  return {_mm512_set1_epi16(static_cast<short>(256 * odd0 - 128 * n)),
          _mm512_set1_epi16(static_cast<short>(odd0))};
}
void Accumulate(GroupSums& g, __m512i bytes) {
  g.raw = _mm512_add_epi16(g.raw, bytes);
  g.odd = _mm512_add_epi16(g.odd, _mm512_srli_epi16(bytes, 8));
}
// acc[k] (rows 16k .. 16k + 15) += scale * the group's sums.
void Flush(const GroupSums& g, float scale, __m512* acc) {
  const __m512i even = _mm512_sub_epi16(g.raw, _mm512_slli_epi16(g.odd, 8));
  const __m512 sc = _mm512_set1_ps(scale);
  const __m512i rows[4] = {_mm512_srai_epi32(_mm512_slli_epi32(even, 16), 16),
                           _mm512_srai_epi32(_mm512_slli_epi32(g.odd, 16), 16),
                           _mm512_srai_epi32(even, 16), _mm512_srai_epi32(g.odd, 16)};
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) acc[k] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(rows[k]), acc[k]);
}

// Row scales and the masked store of one block's 64 sums; [lo, hi) are the
// rows of the block to write.
void FinishBlock(const VqMatrixView& m, float* y, int64_t base, int64_t lo, int64_t hi,
                 const __m512* acc) {
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __mmask16 keep = LaneRange(lo - 16 * k, hi - 16 * k);
    if (!keep) continue;
    const int64_t row = base + 16 * k;
    const __m512 scale = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(keep, m.scales + 2 * row));
    _mm512_mask_storeu_ps(y + row, keep, _mm512_mul_ps(scale, acc[k]));
  }
}

// One pass over the vector positions for N consecutive index blocks, which
// share each table load. S index bytes per row (8-bit indices: S stages;
// VQ4P: S = 3 bytes for its 4 stages).
struct QPass {
  const VqMatrixView* m;
  const uint8_t* qlut;  // or the split float table (PlanePassRun)
  float* y;
  int64_t first_block;
  int64_t lo[4], hi[4];  // per block: the rows of it to write
};

// The four stage indices of VQ4P's packed bytes b0, b1, b2 (stage s is bits
// 6s .. 6s + 5 of b0 | b1 << 8 | b2 << 16); only their low 6 bits are
// meaningful, which is all vpermb reads.
void Unpack6(const __m512i* b, __m512i* idx) {
  const __m512i low2 = _mm512_set1_epi8(0x03), low4 = _mm512_set1_epi8(0x0f);
  idx[0] = b[0];
  idx[1] = _mm512_ternarylogic_epi32(low2, _mm512_srli_epi16(b[0], 6), _mm512_slli_epi16(b[1], 2),
                                     0xca);  // low2 ? b0 >> 6 : b1 << 2
  idx[2] =
      _mm512_ternarylogic_epi32(low4, _mm512_srli_epi16(b[1], 4), _mm512_slli_epi16(b[2], 4), 0xca);
  idx[3] = _mm512_srli_epi16(b[2], 2);
}

template <int S, bool kPacked, int N>
void QPassRun(const QPass& p) {
  const VqMatrixView& m = *p.m;
  const int64_t nv = m.cols / 8, groups = (nv + kVqGroup - 1) / kVqGroup;
  constexpr int kStages = kPacked ? 4 : S;
  constexpr int kWidth = kPacked ? 64 : 256;
  const uint8_t* table = p.qlut + 4 * groups;
  const uint8_t* idx[N];
#pragma GCC unroll 4
  for (int b = 0; b < N; ++b) idx[b] = m.indices + (p.first_block + b) * nv * kQBlock * S;
  __m512i ctrl[S];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) ctrl[s] = _mm512_load_si512(kDeinterleave<S>.ctrl[s]);
  __m512 acc[N][4];
#pragma GCC unroll 4
  for (int b = 0; b < N; ++b)
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) acc[b][k] = _mm512_setzero_ps();

  for (int64_t g = 0; g < groups; ++g) {
    const int64_t v0 = g * kVqGroup, v1 = v0 + kVqGroup < nv ? v0 + kVqGroup : nv;
    GroupSums sums[N];
#pragma GCC unroll 4
    for (int b = 0; b < N; ++b) sums[b] = StartGroup(static_cast<int>(v1 - v0) * kStages);
    for (int64_t v = v0; v < v1; ++v) {
      __m512i stage_idx[N][kStages];
#pragma GCC unroll 4
      for (int b = 0; b < N; ++b) {
        __m512i in[S];
#pragma GCC unroll 8
        for (int j = 0; j < S; ++j) in[j] = _mm512_loadu_si512(idx[b] + v * kQBlock * S + 64 * j);
        if constexpr (kPacked) {
          __m512i bytes[3];
#pragma GCC unroll 3
          for (int j = 0; j < 3; ++j) bytes[j] = Gather<S>(in, ctrl[j], kDeinterleave<S>.pair[j]);
          Unpack6(bytes, stage_idx[b]);
        } else {
#pragma GCC unroll 8
          for (int s = 0; s < S; ++s)
            stage_idx[b][s] = Gather<S>(in, ctrl[s], kDeinterleave<S>.pair[s]);
        }
      }
      const uint8_t* t = table + v * kStages * kWidth;
#pragma GCC unroll 8
      for (int s = 0; s < kStages; ++s) {
        if constexpr (kPacked) {
          const __m512i tab = _mm512_loadu_si512(t + 64 * s);
#pragma GCC unroll 4
          for (int b = 0; b < N; ++b)
            Accumulate(sums[b], _mm512_permutexvar_epi8(stage_idx[b][s], tab));
        } else {
          __m512i tab[4];
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) tab[j] = _mm512_loadu_si512(t + 256 * s + 64 * j);
#pragma GCC unroll 4
          for (int b = 0; b < N; ++b) Accumulate(sums[b], Lookup256(tab, stage_idx[b][s]));
        }
      }
    }
    float scale;
    __builtin_memcpy(&scale, p.qlut + 4 * g, 4);
#pragma GCC unroll 4
    for (int b = 0; b < N; ++b) Flush(sums[b], scale, acc[b]);
  }
#pragma GCC unroll 4
  for (int b = 0; b < N; ++b)
    FinishBlock(m, p.y, (p.first_block + b) * kQBlock, p.lo[b], p.hi[b], acc[b]);
}

// ---- VqApply from the float table split into byte planes: exact ----
//
// The same sums as GatherPass, in the same order, without gathers: byte p of
// every float of a (v, stage) table is a 256-byte plane, looked up like the
// int8 table (two vpermi2b and a blend per plane), and four unpacks rebuild
// the 64 floats. Lane L of the de-interleaved indices holds row PlaneRow(L),
// the row that the unpacks put in order: register k of the rebuilt floats
// holds rows 16k .. 16k + 15.

constexpr int PlaneRow(int lane) {
  return 16 * ((lane % 16) / 4) + 4 * (lane / 16) + lane % 4;
}

template <int S>
constexpr Deinterleave<S> kPlaneDeinterleave = MakeDeinterleave<S>(&PlaneRow);

// Rows 16k .. 16k + 15 of the floats whose bytes are planes[0..3].
void Rebuild(const __m512i* planes, __m512* out) {
  const __m512i lo01 = _mm512_unpacklo_epi8(planes[0], planes[1]);
  const __m512i hi01 = _mm512_unpackhi_epi8(planes[0], planes[1]);
  const __m512i lo23 = _mm512_unpacklo_epi8(planes[2], planes[3]);
  const __m512i hi23 = _mm512_unpackhi_epi8(planes[2], planes[3]);
  out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(lo01, lo23));
  out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(lo01, lo23));
  out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(hi01, hi23));
  out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(hi01, hi23));
}

template <int S, int N>
void PlanePassRun(const QPass& p) {
  const VqMatrixView& m = *p.m;
  const int64_t nv = m.cols / 8;
  const uint8_t* idx[N];
#pragma GCC unroll 4
  for (int b = 0; b < N; ++b) idx[b] = m.indices + (p.first_block + b) * nv * kQBlock * S;
  __m512i ctrl[S];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) ctrl[s] = _mm512_load_si512(kPlaneDeinterleave<S>.ctrl[s]);
  __m512 acc[N][4];
#pragma GCC unroll 4
  for (int b = 0; b < N; ++b)
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) acc[b][k] = _mm512_setzero_ps();
  for (int64_t v = 0; v < nv; ++v) {
    __m512i in[N][S];
#pragma GCC unroll 4
    for (int b = 0; b < N; ++b)
#pragma GCC unroll 8
      for (int j = 0; j < S; ++j) in[b][j] = _mm512_loadu_si512(idx[b] + v * kQBlock * S + 64 * j);
    const uint8_t* t = p.qlut + v * S * 1024;
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      __m512i e[N];
      __mmask64 upper[N];
#pragma GCC unroll 4
      for (int b = 0; b < N; ++b) {
        e[b] = Gather<S>(in[b], ctrl[s], kPlaneDeinterleave<S>.pair[s]);
        upper[b] = _mm512_movepi8_mask(e[b]);
      }
      __m512i bytes[N][4];
#pragma GCC unroll 4
      for (int pl = 0; pl < 4; ++pl) {
        const uint8_t* plane = t + (s * 4 + pl) * 256;
        const __m512i t0 = _mm512_loadu_si512(plane), t1 = _mm512_loadu_si512(plane + 64);
        const __m512i t2 = _mm512_loadu_si512(plane + 128), t3 = _mm512_loadu_si512(plane + 192);
#pragma GCC unroll 4
        for (int b = 0; b < N; ++b)
          bytes[b][pl] = _mm512_mask_blend_epi8(upper[b], _mm512_permutex2var_epi8(t0, e[b], t1),
                                                _mm512_permutex2var_epi8(t2, e[b], t3));
      }
#pragma GCC unroll 4
      for (int b = 0; b < N; ++b) {
        __m512 f[4];
        Rebuild(bytes[b], f);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) acc[b][k] = _mm512_add_ps(acc[b][k], f[k]);
      }
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < N; ++b)
    FinishBlock(m, p.y, (p.first_block + b) * kQBlock, p.lo[b], p.hi[b], acc[b]);
}

using QPassFn = void (*)(const QPass&);

template <int S>
constexpr QPassFn kQPasses[4] = {&QPassRun<S, false, 1>, &QPassRun<S, false, 2>,
                                 &QPassRun<S, false, 3>, &QPassRun<S, false, 4>};
constexpr QPassFn kQPassesPacked[2] = {&QPassRun<3, true, 1>, &QPassRun<3, true, 2>};

template <int S>
constexpr QPassFn kPlanePasses[4] = {&PlanePassRun<S, 1>, &PlanePassRun<S, 2>, &PlanePassRun<S, 3>,
                                     &PlanePassRun<S, 4>};

QPassFn PlanePassFor(const VqMatrixView& m, int blocks) {
  switch (m.stages) {
    case 1:
      return kPlanePasses<1>[blocks - 1];
    case 2:
      return kPlanePasses<2>[blocks - 1];
    case 3:
      return kPlanePasses<3>[blocks - 1];
    case 4:
      return kPlanePasses<4>[blocks - 1];  // at most 2
    case 5:
      return kPlanePasses<5>[0];
    case 6:
      return kPlanePasses<6>[0];
    case 7:
      return kPlanePasses<7>[0];
    default:
      return kPlanePasses<8>[0];
  }
}

QPassFn QPassFor(const VqMatrixView& m, int blocks) {
  if (m.index_bits == 6) return kQPassesPacked[blocks - 1];
  switch (m.stages) {
    case 1:
      return kQPasses<1>[blocks - 1];
    case 2:
      return kQPasses<2>[blocks - 1];
    case 3:
      return kQPasses<3>[blocks - 1];
    case 4:
      return kQPasses<4>[blocks - 1];  // at most 2
    case 5:
      return kQPasses<5>[0];  // two blocks of five or more stages run out of registers
    case 6:
      return kQPasses<6>[0];
    case 7:
      return kQPasses<7>[0];
    default:
      return kQPasses<8>[0];
  }
}

// Quantizes `count` floats at `src` to biased bytes at `out`.
void QuantizeRun(const float* src, int64_t count, float inv, uint8_t* out) {
  const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  const __m512i bias = _mm512_set1_epi32(128);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 k = count - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (count - i)) - 1u);
    __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, src + i), vinv);
    t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);                      // max(NaN, lo) is lo
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(t), bias);  // nearest, ties to even
    _mm_mask_storeu_epi8(out + i, k, _mm512_cvtepi32_epi8(q));
  }
}

// One scale group of the quantized table: `tables` (v, stage) tables of
// `entries` floats at `src` into *scale_at (4 bytes) and `tables` rows of
// `width` biased bytes at `out`, the entries past `entries` holding 0.
void QuantizeGroup(const float* src, int64_t tables, int entries, int width, uint8_t* scale_at,
                   uint8_t* out) {
  const int64_t n = tables * entries;
  __m512 amax = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(k, src + i));
    amax = _mm512_max_ps(a, amax);  // a NaN lane keeps amax
  }
  const float top = _mm512_reduce_max_ps(amax);
  const float scale = top / 127.f, inv = top > 0.f ? 127.f / top : 0.f;
  __builtin_memcpy(scale_at, &scale, 4);
  for (int64_t t = 0; t < tables; ++t, out += width) {
    QuantizeRun(src + t * entries, entries, inv, out);
    for (int e = entries; e < width; e += 64) {
      const int left = width - e;
      _mm512_mask_storeu_epi8(out + e, left >= 64 ? ~0ull : (1ull << left) - 1,
                              _mm512_set1_epi8(static_cast<char>(128)));
    }
  }
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

namespace waste::kernels::avx512 {

void VqQuantizeLut(const float* lut, int64_t cols, int stages, int entries, int index_bits,
                   uint8_t* qlut) {
  const int64_t nv = cols / 8, groups = (nv + kVqGroup - 1) / kVqGroup;
  const int width = index_bits == 6 ? 64 : 256;
  uint8_t* bytes = qlut + 4 * groups;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t v0 = g * kVqGroup, v1 = v0 + kVqGroup < nv ? v0 + kVqGroup : nv;
    QuantizeGroup(lut + v0 * stages * entries, (v1 - v0) * stages, entries, width, qlut + 4 * g,
                  bytes + v0 * stages * width);
  }
}

namespace {

// Runs the pass pass_for picks over the 64-row blocks of [row_begin,
// row_end), up to max_blocks at a time.
void RunBlocks(const VqMatrixView& m, const uint8_t* table, float* y, int64_t row_begin,
               int64_t row_end, QPassFn (*pass_for)(const VqMatrixView&, int), int max_blocks) {
  const int64_t last = (row_end - 1) / kQBlock;
  for (int64_t b = row_begin / kQBlock; b <= last;) {
    const int blocks = last - b + 1 < max_blocks ? static_cast<int>(last - b + 1) : max_blocks;
    QPass p{&m, table, y, b, {}, {}};
    for (int j = 0; j < blocks; ++j) {
      const int64_t base = (b + j) * kQBlock;
      p.lo[j] = (row_begin > base ? row_begin : base) - base;
      p.hi[j] = (row_end < base + kQBlock ? row_end : base + kQBlock) - base;
    }
    pass_for(m, blocks)(p);
    b += blocks;
  }
}

// Byte b of float j goes to byte 16 * b + j: each 16-byte quarter is a plane.
alignas(64) constexpr uint8_t kByPlane[64] = {
    0,  4,  8,  12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 1,  5,  9,  13, 17, 21,
    25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 2,  6,  10, 14, 18, 22, 26, 30, 34, 38, 42, 46,
    50, 54, 58, 62, 3,  7,  11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63};

// Entries 16j .. 16j + 15 of a (v, stage) table, `floats`, into its four
// planes: byte p of each to out[256 p + lane], out = the table's planes + 16j.
void StorePlanes(__m512i by_plane, __m512 floats, uint8_t* out) {
  const __m512i q = _mm512_permutexvar_epi8(by_plane, _mm512_castps_si512(floats));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_castsi512_si128(q));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 256), _mm512_extracti32x4_epi32(q, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 512), _mm512_extracti32x4_epi32(q, 2));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 768), _mm512_extracti32x4_epi32(q, 3));
}

// The codebooks with entries in the lanes, as BuildStageChunk's gathers
// put them: books[stage][16 entries][dimension][lane], every stage's at
// once (VQ3R: 24 KiB, in L1 for every vector position); lanes past
// `entries` are zero and never stored.
using TransposedBooks = float[8][16][8][16];
void TransposeBooks(const float* const* codebooks, int stages, int entries,
                    TransposedBooks& books) {
  for (int s = 0; s < stages; ++s)
    for (int c = 0; c < (entries + 15) / 16; ++c)
      for (int d = 0; d < 8; ++d)
        for (int lane = 0; lane < 16; ++lane)
          books[s][c][d][lane] =
              16 * c + lane < entries ? codebooks[s][(16 * c + lane) * 8 + d] : 0.f;
}

// BuildStageChunk's sum for 16 entries: dimension 0's product, then FMAs
// in order. xs: the vector position's 8 inputs, broadcast.
__m512 EntrySums(const __m512* xs, const float (*dims)[16]) {
  __m512 acc = _mm512_mul_ps(xs[0], _mm512_load_ps(dims[0]));
#pragma GCC unroll 7
  for (int d = 1; d < 8; ++d) acc = _mm512_fmadd_ps(xs[d], _mm512_load_ps(dims[d]), acc);
  return acc;
}

}  // namespace

void VqSplitLut(const float* lut, int64_t cols, int stages, int entries, uint8_t* planes) {
  const __m512i by_plane = _mm512_load_si512(kByPlane);
  const int64_t tables = cols / 8 * stages;
  for (int64_t i = 0; i < tables; ++i) {
    const float* src = lut + i * entries;
    uint8_t* out = planes + i * 1024;
    for (int j = 0; j < 16; ++j) {
      StorePlanes(by_plane, _mm512_loadu_ps(src + 16 * j), out + 16 * j);
    }
  }
}

void VqBuildSplitLut(const float* const* codebooks, int stages, const float* x, int64_t cols,
                     uint8_t* planes) {
  alignas(64) TransposedBooks books;
  TransposeBooks(codebooks, stages, 256, books);
  const __m512i by_plane = _mm512_load_si512(kByPlane);
  for (int64_t v = 0; v < cols / 8; ++v) {
    __m512 xs[8];
#pragma GCC unroll 8
    for (int d = 0; d < 8; ++d) xs[d] = _mm512_set1_ps(x[8 * v + d]);
    for (int s = 0; s < stages; ++s) {
      uint8_t* out = planes + (v * stages + s) * 1024;
      for (int c = 0; c < 16; ++c) StorePlanes(by_plane, EntrySums(xs, books[s][c]), out + 16 * c);
    }
  }
}

void VqBuildQLut(const float* const* codebooks, int stages, int entries, int index_bits,
                 const float* x, int64_t cols, uint8_t* qlut) {
  // Each scale group's floats, laid out as VqBuildLut lays them, into `lut`
  // (VQ3R: 24 KiB), quantized from there.
  alignas(64) TransposedBooks books;
  TransposeBooks(codebooks, stages, entries, books);
  const int chunks = (entries + 15) / 16;
  const int64_t nv = cols / 8, groups = (nv + kVqGroup - 1) / kVqGroup;
  const int64_t stride = static_cast<int64_t>(stages) * entries;  // floats per vector position
  const int width = index_bits == 6 ? 64 : 256;
  std::vector<float> lut(static_cast<size_t>(kVqGroup * stride));
  uint8_t* bytes = qlut + 4 * groups;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t v0 = g * kVqGroup, v1 = v0 + kVqGroup < nv ? v0 + kVqGroup : nv;
    for (int64_t v = v0; v < v1; ++v) {
      __m512 xs[8];
#pragma GCC unroll 8
      for (int d = 0; d < 8; ++d) xs[d] = _mm512_set1_ps(x[8 * v + d]);
      float* out = lut.data() + (v - v0) * stride;
      for (int s = 0; s < stages; ++s)
        for (int c = 0; c < chunks; ++c) {
          const int count = entries - 16 * c < 16 ? entries - 16 * c : 16;
          _mm512_mask_storeu_ps(out + s * entries + 16 * c,
                                static_cast<__mmask16>((1u << count) - 1u),
                                EntrySums(xs, books[s][c]));
        }
    }
    QuantizeGroup(lut.data(), (v1 - v0) * stages, entries, width, qlut + 4 * g,
                  bytes + v0 * stages * width);
  }
}

bool VqApplySplit(const VqMatrixView& m, const uint8_t* planes, float* y, int64_t row_begin,
                  int64_t row_end) {
  if (m.index_block != kQBlock || m.index_bits != 8 || m.stages < 1 || m.stages > 8) return false;
  // Four blocks per pass read the table from L2 half as often as two
  // (gate/up's 884 KiB table nearly fills it): 1.7x faster for VQ3R gate/up.
  RunBlocks(m, planes, y, row_begin, row_end, &PlanePassFor,
            m.stages <= 3   ? 4
            : m.stages == 4 ? 2
                            : 1);
  return true;
}

bool VqApplyQ(const VqMatrixView& m, const uint8_t* qlut, float* y, int64_t row_begin,
              int64_t row_end) {
  if (m.index_block != kQBlock) return false;
  if (m.index_bits == 6 ? m.stages != 4 || m.entries > 64
                        : m.index_bits != 8 || m.stages < 1 || m.stages > 8)
    return false;
  // Blocks per pass: four for up to 3 stages (20% faster than two), two for
  // VQ4P and 4 stages, one for more (two of those would spill).
  const int blocks = m.index_bits == 8 && m.stages > 4    ? 1
                     : m.index_bits == 8 && m.stages <= 3 ? 4
                                                          : 2;
  RunBlocks(m, qlut, y, row_begin, row_end, &QPassFor, blocks);
  return true;
}

}  // namespace waste::kernels::avx512

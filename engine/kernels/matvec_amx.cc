// The Q4G product in groups of 128 on AMX-INT8 tiles (Isa::kAmx). Compiled
// with -mamx-tile -mamx-int8 and the AVX-512 flags; see simd.h for what this
// file may use.
//
// The input is avx512::Q4FixInput's exact fixed point (three signed digits
// a column, q4_fixed.h). A tile product `tdpbusd` multiplies 16 rows of 64
// unsigned bytes (A: a group's even or odd columns' nibbles n in [0, 15],
// for 16 rows of the matrix) by 16 x 4 signed bytes per token (B: the same
// columns' digits, four columns a tile row, one token a 4-byte column) into
// 16 rows x tokens int32 sums. Per row r, token t, group g and digit k that
// gives the whole group's sum c_k = sum over the group of n * d_k, exactly.
//
// The result's arithmetic, one definition for every number of tokens (so a
// token's bits do not depend on the tokens beside it, nor on the chunk):
//   e_k = c_k - 8 * sum of the group's d_k       (the weight is n - 8; int32)
//   u   = e_2 * 256 + e_1                          (int32, |u| < 2^25)
//   s   = fmaf(float(u), 256, float(e_0))          (the group's sum, rounded)
//   acc = fmaf(s, scale * unit, acc)               (groups in order, from 0)
// and y = acc. This is not the AVX-512 VNNI path's order (it keeps 16 lanes
// of 8 columns and adds them at the end), so kAmx is its own Isa; the
// kernel tests hold it to a scalar twin of the lines above bit for bit and
// to the float product's tolerance (README.md, "AMX").
#include "engine/kernels/avx512_intrin.h"

#include <cstring>

#include "engine/kernels/q4_fixed.h"
#include "engine/kernels/simd.h"

namespace waste::kernels::amx {
namespace {

using q4fixed::FixedInput;
using q4fixed::kAmxTokensAPass;

constexpr int kDigits = 3;

// The tile registers go by number (GCC's tile intrinsics want literals).
// With several inputs (Rows): 0 and 1 A, the weights' even and odd
// columns; 2, 3 and 4 C, one a digit; 5 and 6 B, the tokens' digits for
// the even and odd columns. OneInput says its own.

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// A of 16 rows of 64 bytes; B and C 16 rows of `columns` 4-byte columns.
void Configure(int columns) {
  TileConfig c;
  for (int t = 0; t < 7; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = static_cast<uint16_t>(t <= 1 ? 64 : 4 * columns);
  }
  _tile_loadconfig(&c);
}

// One tile of up to 16 tokens, laid out as the B tiles want them.
struct TokenTile {
  int n = 0;  // tokens in the tile, 1..16
  // n > 1: a C tile a digit, B n 4-byte columns wide,
  //   [groups][digit][even, odd][16 tile rows][n tokens][4 bytes]: token t's
  //   digits of columns 128 g + 2 (4 i + j) + odd at [g][k][odd][i][t][j].
  // n == 1: the digits are B's 3 columns, one C tile holds all three sums
  //   (a third of the tile products): [groups][even, odd][16][3 digits][4].
  int8_t* b = nullptr;
  int32_t (*eight_sums)[kDigits][16] = nullptr;  // [groups][digit][token]: 8 * sum of d_k
  float (*unit)[16] = nullptr;                   // [groups][token]: the input's step
};

// Lays out the inputs f[0, real) as a tile `width` tokens wide (real <=
// width <= 16) at `at`, q4fixed::AmxTileBytes(groups, width) bytes; the
// columns past `real` are zero digits and zero steps.
TokenTile LayOut(const FixedInput* f, int real, int width, int64_t groups, uint8_t* at) {
  const int n = width;
  std::memset(at, 0, static_cast<size_t>(q4fixed::AmxTileBytes(groups, width)));
  TokenTile t;
  t.n = n;
  t.b = reinterpret_cast<int8_t*>(at);
  at += groups * kDigits * 2 * 16 * 4 * n;
  t.eight_sums = reinterpret_cast<int32_t (*)[kDigits][16]>(at);
  at += groups * kDigits * 16 * 4;
  t.unit = reinterpret_cast<float (*)[16]>(at);
  // Dword i of a token's 64 digits goes to tile row i, column `token`.
  const __m512i rows = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(n));
  const __m512i eights = _mm512_set1_epi8(8);
  const __m512i triples = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(3));
  for (int token = 0; token < real; ++token) {
    for (int64_t g = 0; g < groups; ++g) {
      t.unit[g][token] = f[token].unit[g];
      for (int k = 0; k < kDigits; ++k) {
        const int8_t* d = f[token].digits + (g * kDigits + k) * 128;
        const __m512i even = _mm512_load_si512(d), odd = _mm512_load_si512(d + 64);
        t.eight_sums[g][k][token] = _mm512_reduce_add_epi32(
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, even), eights,
                                odd));
        if (n == 1) {
          int8_t* b = t.b + g * 2 * 192 + 4 * k;
          _mm512_i32scatter_epi32(b, triples, even, 4);
          _mm512_i32scatter_epi32(b + 192, triples, odd, 4);
          continue;
        }
        int8_t* b = t.b + (g * kDigits + k) * 2 * 64 * n + 4 * token;
        _mm512_i32scatter_epi32(b, rows, even, 4);
        _mm512_i32scatter_epi32(b + 64 * n, rows, odd, 4);
      }
    }
  }
  return t;
}

// The group's sum s from the three digits' tile sums and their eight_sums.
__m512 GroupSum(__m512i c0, __m512i c1, __m512i c2, __m512i s0, __m512i s1, __m512i s2) {
  const __m512i e0 = _mm512_sub_epi32(c0, s0);
  const __m512i e1 = _mm512_sub_epi32(c1, s1);
  const __m512i e2 = _mm512_sub_epi32(c2, s2);
  const __m512i u = _mm512_add_epi32(_mm512_slli_epi32(e2, 8), e1);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_set1_ps(256.f), _mm512_cvtepi32_ps(e0));
}

// C tiles 2..4 = the group's digit sums for one token tile (B at `b`).
void DigitSums(const int8_t* b, int n) {
  const int64_t stride = 4 * n, plane = 64 * n;  // a B tile's row; a B tile
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_loadd(5, b, stride);
  _tile_loadd(6, b + plane, stride);
  _tile_dpbusd(2, 0, 5);
  _tile_dpbusd(2, 1, 6);
  _tile_loadd(5, b + 2 * plane, stride);
  _tile_loadd(6, b + 3 * plane, stride);
  _tile_dpbusd(3, 0, 5);
  _tile_dpbusd(3, 1, 6);
  _tile_loadd(5, b + 4 * plane, stride);
  _tile_loadd(6, b + 5 * plane, stride);
  _tile_dpbusd(4, 0, 5);
  _tile_dpbusd(4, 1, 6);
}

// Splits one row's group, its 64 bytes at `q` and its half-float scale at
// `h`, into to[0, 64) even columns' nibbles and to[64, 128) odd, and *scale.
void SplitGroup(const uint8_t* q, const uint8_t* h, uint8_t* to, float* scale) {
  const __m512i nibble = _mm512_set1_epi8(15);
  const __m512i v = _mm512_loadu_si512(q);
  _mm512_store_si512(to, _mm512_and_si512(v, nibble));
  _mm512_store_si512(to + 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
  uint16_t half;
  std::memcpy(&half, h, sizeof half);
  *scale = _cvtsh_ss(half);
}

// Splits group g of rows [r0, r0 + rows) into to[m] and scale[m].
void Unpack(const MatrixView& w, int64_t r0, int rows, int64_t g, uint8_t (*to)[128],
            float* scale) {
  const int64_t groups = w.cols / 128;
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales);
  for (int m = 0; m < rows; ++m) {
    const int64_t at = (r0 + m) * groups + g;
    SplitGroup(w.payload + at * 64, scales + 2 * at, to[m], &scale[m]);
  }
}

// One input (decode): rows [row_begin, row_end) into y, 16 rows at a time.
// B holds the three digits as 3 columns, so one C tile gets all three sums
// of 16 rows; groups alternate between two sets of tiles (A in 0, 1 or 4,
// 7; C in 2 or 3; B in 5 and 6), so that one group's products overlap the
// next one's instead of waiting on the same C tile.
//
// The tiles want a group's rows side by side; read that way from memory
// they are 16 or 32 short streams that the hardware prefetchers follow
// badly, even with a software prefetch (20% slower than VNNI's row after
// row, matvec_bench blocks_from_memory). So the 16 rows are split into a
// buffer first in memory order, a row's groups one run, up to kSpan groups
// at a time (spans of equal size: a short last one would be short runs
// again; 12 keeps the buffer, 24 KiB, in L1 beside the rows passing
// through); each line split asks for one line of the next 16 rows, in
// memory order (prefetching the same spans' bytes instead left two threads
// reading the trunk 15% below the bound, out of order for the DRAM). The
// tiles then read the buffer.
void OneInput(const MatrixView& w, const TokenTile& tile, float* y, int64_t row_begin,
              int64_t row_end) {
  constexpr int64_t kSpan = 12;
  const int64_t groups = w.cols / 128;
  const int64_t spans = (groups + kSpan - 1) / kSpan, even_span = (groups + spans - 1) / spans;
  alignas(64) uint8_t a[kSpan][16][128];  // [group of the span][row]: nibbles, even then odd
  // [group of the span][row]; zeroed once, so that a short last block's
  // missing rows (whose sums are dropped) never read uninitialized floats.
  alignas(64) float scale[kSpan][16] = {};
  alignas(64) int32_t c[2][48] = {};  // [C tile][16 rows][3 digits]
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = static_cast<uint16_t>(t == 0 || t == 1 || t == 4 || t == 7 ? 64 : 12);
  }
  _tile_loadconfig(&config);
  // Lane m of digit k's sums is at 3 m + k of a C tile stored 12 bytes a
  // row; these pick them from the three vectors it fills.
  const __m512i pick[kDigits] = {
      _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45),
      _mm512_setr_epi32(1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 34, 37, 40, 43, 46),
      _mm512_setr_epi32(2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 44, 47)};
  const __mmask16 past32[kDigits] = {0xf800, 0xf800, 0xfc00};  // lanes whose 3 m + k >= 32
  const auto group_sum = [&](const int32_t* sums, int64_t g) {
    const __m512i v0 = _mm512_load_si512(sums), v1 = _mm512_load_si512(sums + 16),
                  v2 = _mm512_load_si512(sums + 32);
    __m512i e[kDigits];
    for (int k = 0; k < kDigits; ++k)
      e[k] = _mm512_mask_permutexvar_epi32(_mm512_permutex2var_epi32(v0, pick[k], v1), past32[k],
                                           pick[k], v2);
    return GroupSum(e[0], e[1], e[2], _mm512_set1_epi32(tile.eight_sums[g][0][0]),
                    _mm512_set1_epi32(tile.eight_sums[g][1][0]),
                    _mm512_set1_epi32(tile.eight_sums[g][2][0]));
  };
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += 16) {
    const int rows = static_cast<int>(row_end - r0 < 16 ? row_end - r0 : 16);
    // A short last block: the tile's missing rows read zeros (their sums
    // are dropped, but not left uninitialized).
    if (rows < 16)
      for (int64_t j = 0; j < kSpan; ++j) std::memset(a[j][rows], 0, (16 - rows) * 128);
    __m512 acc = _mm512_setzero_ps();  // a lane a row
    // The next 16 rows' lines in memory order, one a line split here.
    const char* next = reinterpret_cast<const char*>(w.payload + (r0 + 16) * groups * 64);
    const int64_t next_lines = (row_end - r0 - 16 < 16 ? row_end - r0 - 16 : 16) * groups;
    int64_t line = 0;
    for (int64_t g0 = 0; g0 < groups; g0 += even_span) {
      const int64_t span = groups - g0 < even_span ? groups - g0 : even_span;
      for (int m = 0; m < rows; ++m) {
        const uint8_t* q = w.payload + ((r0 + m) * groups + g0) * 64;
        const uint8_t* h = scales + 2 * ((r0 + m) * groups + g0);
        for (int64_t j = 0; j < span; ++j, ++line) {
          if (line < next_lines) _mm_prefetch(next + 64 * line, _MM_HINT_T1);
          SplitGroup(q + 64 * j, h + 2 * j, a[j][m], &scale[j][m]);
        }
      }
      for (int64_t j = 0; j < span; ++j) {
        const int64_t g = g0 + j;
        const int8_t* b = tile.b + g * 2 * 192;
        // Which set of tiles: written out twice, since a tile's number must
        // be a literal (GCC's tile intrinsics paste it into the assembly).
        const int odd = j & 1;
        _tile_loadd(5, b, 12);
        _tile_loadd(6, b + 192, 12);
        if (odd) {
          _tile_loadd(4, a[j][0], 128);
          _tile_loadd(7, a[j][0] + 64, 128);
          _tile_zero(3);
          _tile_dpbusd(3, 4, 5);
          _tile_dpbusd(3, 7, 6);
          _tile_stored(3, c[1], 12);
        } else {
          _tile_loadd(0, a[j][0], 128);
          _tile_loadd(1, a[j][0] + 64, 128);
          _tile_zero(2);
          _tile_dpbusd(2, 0, 5);
          _tile_dpbusd(2, 1, 6);
          _tile_stored(2, c[0], 12);
        }
        const __m512 step =
            _mm512_mul_ps(_mm512_set1_ps(tile.unit[g][0]), _mm512_load_ps(scale[j]));
        acc = _mm512_fmadd_ps(group_sum(c[odd], g), step, acc);
      }
    }
    alignas(64) float out[16];
    _mm512_store_ps(out, acc);
    for (int m = 0; m < rows; ++m) y[r0 + m] = out[m];
  }
  _tile_release();
}

// Rows [row_begin, row_end) against the token tiles tiles[0, count), all
// of n > 1 tokens a tile (16 when count > 1), into ys (16 a tile, in order).
void Rows(const MatrixView& w, const TokenTile* tiles, int count, float* const* ys, size_t n_ys,
          int64_t row_begin, int64_t row_end) {
  const int64_t groups = w.cols / 128;
  const int n = tiles[0].n;
  alignas(64) uint8_t a[2][16][128] = {};  // two groups' nibbles, in turn
  alignas(64) float scale[16] = {};
  alignas(64) int32_t c[kDigits][16][16] = {};
  alignas(64) float acc[kAmxTokensAPass / 16][16][16];  // [tile][row][token]
  Configure(n);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += 16) {
    const int rows = static_cast<int>(row_end - r0 < 16 ? row_end - r0 : 16);
    for (int t = 0; t < count; ++t)
      for (int m = 0; m < 16; ++m) _mm512_store_ps(acc[t][m], _mm512_setzero_ps());
    // The next 16 rows, 16 lines a group's step (as OneInput does).
    const int64_t next_rows = row_end - r0 - rows < 16 ? row_end - r0 - rows : 16;
    const char* next = reinterpret_cast<const char*>(w.payload + (r0 + rows) * groups * 64);
    const int64_t next_lines = next_rows * groups;
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t line = 16 * g; line < 16 * (g + 1) && line < next_lines; ++line)
        _mm_prefetch(next + line * 64, _MM_HINT_T1);
      uint8_t (*to)[128] = a[g & 1];
      Unpack(w, r0, rows, g, to, scale);
      _tile_loadd(0, to[0], 128);
      _tile_loadd(1, to[0] + 64, 128);
      for (int t = 0; t < count; ++t) {
        const TokenTile& tile = tiles[t];
        // A row's tokens are one vector, a lane a token.
        DigitSums(tile.b + g * kDigits * 2 * 64 * n, n);
        _tile_stored(2, c[0], 64);
        _tile_stored(3, c[1], 64);
        _tile_stored(4, c[2], 64);
        const __m512i s0 = _mm512_load_si512(tile.eight_sums[g][0]);
        const __m512i s1 = _mm512_load_si512(tile.eight_sums[g][1]);
        const __m512i s2 = _mm512_load_si512(tile.eight_sums[g][2]);
        const __m512 unit = _mm512_load_ps(tile.unit[g]);
        for (int m = 0; m < rows; ++m) {
          const __m512 s = GroupSum(_mm512_load_si512(c[0][m]), _mm512_load_si512(c[1][m]),
                                    _mm512_load_si512(c[2][m]), s0, s1, s2);
          const __m512 step = _mm512_mul_ps(unit, _mm512_set1_ps(scale[m]));
          _mm512_store_ps(acc[t][m], _mm512_fmadd_ps(s, step, _mm512_load_ps(acc[t][m])));
        }
      }
    }
    for (int t = 0; t < count; ++t)
      for (int j = 0; j < n && static_cast<size_t>(16 * t + j) < n_ys; ++j)
        for (int m = 0; m < rows; ++m) ys[16 * t + j][r0 + m] = acc[t][m][j];
  }
  _tile_release();
}

}  // namespace

void Q4FixedRows(const MatrixView& w, const FixedInput* fixed, float* const* ys, size_t n,
                 int64_t row_begin, int64_t row_end, uint8_t* scratch) {
  const int64_t groups = w.cols / 128;
  for (size_t first = 0; first < n; first += kAmxTokensAPass) {
    const size_t here = n - first < kAmxTokensAPass ? n - first : kAmxTokensAPass;
    // One tile of `here` tokens, or tiles of 16 with the last one padded
    // with zero digits (a B tile's width is set once a pass).
    TokenTile tiles[kAmxTokensAPass / 16];
    const int count = static_cast<int>((here + 15) / 16);
    const int width = here <= 16 ? static_cast<int>(here) : 16;
    uint8_t* at = scratch;
    for (int t = 0; t < count; ++t) {
      const int real = static_cast<int>(here - 16 * t < 16 ? here - 16 * t : 16);
      tiles[t] = LayOut(fixed + first + 16 * t, real, width, groups, at);
      at += q4fixed::AmxTileBytes(groups, width);
    }
    if (here == 1)
      OneInput(w, tiles[0], ys[first], row_begin, row_end);
    else
      Rows(w, tiles, count, ys + first, here, row_begin, row_end);
  }
}

}  // namespace waste::kernels::amx

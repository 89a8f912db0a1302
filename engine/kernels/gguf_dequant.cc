#include "engine/kernels/gguf_dequant.h"

#include <cstring>

#include "engine/format/encoding.h"
#include "engine/kernels/gguf_iq_grids.h"

namespace waste::kernels {
namespace {

using format::F16ToF32;
constexpr int kQK = 256;  // values per K-quant super-block (ggml's QK_K)

uint16_t U16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float Half(const uint8_t* p) {
  return F16ToF32(U16(p));
}

// The 32-value block types: a block's nibble at value j (0..31): low
// nibbles are values 0..15, high nibbles 16..31.
int Nibble(const uint8_t* qs, int j) {
  return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
}

// The factored types (gguf_dequant.h): each as its factors per 16 values
// and its codes. The package's arithmetic is a[j / 16] * float(q) (less
// b[j / 16]): Q8_0 multiplies float(q) * d, the same product; Q4_1 and
// Q5_1 add their min m, which is subtracting b = -m, bit for bit.
void DFactors(const uint8_t* b, float* a, float*) {  // one f16 d a block of 32
  a[0] = a[1] = Half(b);
}
void DMinFactors(const uint8_t* b, float* a, float* m) {  // d, then the min
  a[0] = a[1] = Half(b);
  m[0] = m[1] = -Half(b + 2);
}
void Q4_0Codes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Nibble(b + 2, j) - 8);
}
void Q4_1Codes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Nibble(b + 4, j));
}
// Q5_0 and Q5_1: a fifth bit, bit j of the u32 before the nibbles.
int Fifth(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return static_cast<int>(h >> j & 1) << 4;
}
void Q5_0Codes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < 32; ++j)
    q[j] = static_cast<int8_t>((Nibble(b + 6, j) | Fifth(b + 2, j)) - 16);
}
void Q5_1Codes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Nibble(b + 8, j) | Fifth(b + 4, j));
}
void Iq4NlCodes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = kGgufIq4Levels[Nibble(b + 2, j)];
}
void Q8_0Codes(const uint8_t* b, int8_t* q) {
  std::memcpy(q, b + 2, 32);
}
// MXFP4: an E8M0 exponent, then E2M1 nibbles; the scale halved as ggml's
// ggml_e8m0_to_fp32_half builds it (exponents 0 and 1 as subnormals), the
// codes doubled.
void Mxfp4Factors(const uint8_t* b, float* a, float*) {
  const uint32_t e = b[0];
  const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
  std::memcpy(&a[0], &bits, 4);
  a[1] = a[0];
}
void Mxfp4Codes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = kGgufE2m1Doubled[Nibble(b + 1, j)];
}

// The K-quants' 2-bit fields (Q2_K, Q3_K's low bits): the value at j (0..255)
// of 64 bytes: two halves of 128 values, four 32-value shifts each.
int Crumb(const uint8_t* qs, int j) {
  return qs[(j / 128) * 32 + j % 32] >> (2 * (j % 128 / 32)) & 3;
}

// Q2_K: 16 bytes of scales (low nibble scale, high nibble min), 64 of
// codes, then d and dmin.
void Q2_KFactors(const uint8_t* b, float* a, float* m) {
  const float d = Half(b + 80), dmin = Half(b + 82);
  for (int i = 0; i < 16; ++i) {
    a[i] = d * static_cast<float>(b[i] & 15);
    m[i] = dmin * static_cast<float>(b[i] >> 4);
  }
}
void Q2_KCodes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<int8_t>(Crumb(b + 16, j));
}
// Q3_K: 32 bytes of hmask (bit j/32 of byte j%32 set means no -4), 64 of
// low bits, 12 of sixteen 6-bit scales (4 low bits, then 2 high), then d.
void Q3_KFactors(const uint8_t* b, float* a, float*) {
  const uint8_t* sc = b + 96;
  const float d = Half(b + 108);
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? sc[i] & 15 : sc[i - 8] >> 4;
    const int high = sc[8 + i % 4] >> (2 * (i / 4)) & 3;
    a[i] = d * static_cast<float>((low | high << 4) - 32);
  }
}
void Q3_KCodes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < kQK; ++j)
    q[j] = static_cast<int8_t>(Crumb(b + 32, j) - (b[j % 32] >> (j / 32) & 1 ? 0 : 4));
}
// Q4_K's and Q5_K's d, dmin, then eight 6-bit scales and mins packed in
// 12 bytes, one pair per 32 values.
void Q45_KFactors(const uint8_t* b, float* a, float* m) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* s = b + 4;
  for (int i = 0; i < 8; ++i) {
    const int sc = i < 4 ? s[i] & 63 : (s[i + 4] & 15) | ((s[i - 4] >> 6) << 4);
    const int mn = i < 4 ? s[i + 4] & 63 : (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
    a[2 * i] = a[2 * i + 1] = d * static_cast<float>(sc);
    m[2 * i] = m[2 * i + 1] = dmin * static_cast<float>(mn);
  }
}
// 128 bytes of nibbles: sub-block 2c the low nibbles of bytes 32c.., 2c+1
// the high ones.
int K4Nibble(const uint8_t* qs, int j) {
  return qs[(j / 64) * 32 + j % 32] >> (4 * (j / 32 % 2)) & 15;
}
void Q4_KCodes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<int8_t>(K4Nibble(b + 16, j));
}
// Q5_K: Q4_K's nibbles (at 48) and a fifth bit, bit j/32 of qh[j % 32].
void Q5_KCodes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < kQK; ++j)
    q[j] = static_cast<int8_t>(K4Nibble(b + 48, j) | (b[16 + j % 32] >> (j / 32) & 1) << 4);
}
// Q6_K: 128 bytes of low nibbles (halves of 64 bytes, low then high
// nibbles), 64 of high 2 bits (halves of 32 bytes, four shifts), sixteen
// int8 scales, then d.
void Q6_KFactors(const uint8_t* b, float* a, float*) {
  const float d = Half(b + 208);
  for (int i = 0; i < 16; ++i) a[i] = d * static_cast<float>(static_cast<int8_t>(b[192 + i]));
}
void Q6_KCodes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < kQK; ++j) {
    const int half = j / 128, e = j % 128;
    const int low = b[half * 64 + e % 64] >> (4 * (e / 64)) & 15;
    const int high = b[128 + half * 32 + e % 32] >> (2 * (e / 32)) & 3;
    q[j] = static_cast<int8_t>((low | high << 4) - 32);
  }
}
// IQ4_XS: d, 2 bytes of scales' high bits, 4 of low nibbles, then 16 bytes
// per 32 values indexing kGgufIq4Levels.
void Iq4XsFactors(const uint8_t* b, float* a, float*) {
  const float d = Half(b);
  const uint16_t scales_h = U16(b + 2);
  for (int i = 0; i < 8; ++i) {
    const int ls = (b[4 + i / 2] >> (4 * (i % 2)) & 15) | ((scales_h >> (2 * i) & 3) << 4);
    a[2 * i] = a[2 * i + 1] = d * static_cast<float>(ls - 32);
  }
}
void Iq4XsCodes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < kQK; ++j)
    q[j] = kGgufIq4Levels[b[8 + (j / 32) * 16 + j % 16] >> (4 * (j % 32 / 16)) & 15];
}

// The 2-3 bit grid types (IQ2_XXS, IQ3_XXS): 32 values a group, each with
// a u32 whose top 4 bits are its scale and whose four 7-bit fields index
// ggml's ksigns, the signs of 8 values each: the 7 bits, then their parity
// (an even count of minus signs).
uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
int KSigns(uint32_t aux, int j) {
  const uint32_t s = aux >> (7 * j) & 127;
  return static_cast<int>(s | (static_cast<uint32_t>(__builtin_popcount(s)) & 1) << 7);
}
// A group's factor, d (0.5 + scale) times 0.25 (IQ2_XXS) or 0.5 (IQ3_XXS),
// in the package's order.
void GridFactors(float d, uint32_t aux, float unit, float* a) {
  a[0] = a[1] = d * (0.5f + static_cast<float>(aux >> 28)) * unit;
}
int8_t Signed(int magnitude, int signs, int i) {
  return static_cast<int8_t>(signs >> i & 1 ? -magnitude : magnitude);
}
// IQ2_XXS: d, then per group 4 grid indices (8 values each) and its u32.
void Iq2XxsFactors(const uint8_t* b, float* a, float*) {
  for (int g = 0; g < 8; ++g) GridFactors(Half(b), U32(b + 6 + 8 * g), 0.25f, a + 2 * g);
}
void Iq2XxsCodes(const uint8_t* b, int8_t* q) {
  for (int g = 0; g < 8; ++g) {
    const uint8_t* p = b + 2 + 8 * g;
    for (int j = 0; j < 4; ++j) {
      const uint64_t point = kGgufIq2XxsGrid[p[j]];
      const int signs = KSigns(U32(p + 4), j);
      for (int i = 0; i < 8; ++i)
        q[32 * g + 8 * j + i] = Signed(static_cast<int>(point >> (8 * i) & 255), signs, i);
    }
  }
}
// IQ3_XXS: d, 64 grid indices (4 values each), then each group's u32.
void Iq3XxsFactors(const uint8_t* b, float* a, float*) {
  for (int g = 0; g < 8; ++g) GridFactors(Half(b), U32(b + 66 + 4 * g), 0.5f, a + 2 * g);
}
void Iq3XxsCodes(const uint8_t* b, int8_t* q) {
  for (int g = 0; g < 8; ++g) {
    const uint32_t aux = U32(b + 66 + 4 * g);
    for (int j = 0; j < 4; ++j) {
      const int signs = KSigns(aux, j);
      for (int i = 0; i < 8; ++i) {
        const uint32_t point = kGgufIq3XxsGrid[b[2 + 8 * g + 2 * j + i / 4]];
        q[32 * g + 8 * j + i] = Signed(static_cast<int>(point >> (8 * (i % 4)) & 255), signs, i);
      }
    }
  }
}

// IQ3_S: d, 64 grid indices' low 8 bits, 8 bytes of their ninth bits, 32
// bytes of signs (a bit a value), then a 4-bit scale per group: d (1 + 2s).
void Iq3SFactors(const uint8_t* b, float* a, float*) {
  const float d = Half(b);
  for (int g = 0; g < 8; ++g)
    a[2 * g] = a[2 * g + 1] =
        d * static_cast<float>(1 + 2 * (b[106 + g / 2] >> (4 * (g % 2)) & 15));
}
void Iq3SCodes(const uint8_t* b, int8_t* q) {
  for (int j = 0; j < kQK; ++j) {
    const int k = j / 4;  // the grid index
    const uint32_t point = kGgufIq3SGrid[b[2 + k] | (b[66 + k / 8] >> (k % 8) & 1) << 8];
    q[j] = Signed(static_cast<int>(point >> (8 * (j % 4)) & 255), b[74 + j / 8], j % 8);
  }
}
// IQ2_XS: d, 32 u16s (a 9-bit grid index, 8 values, and a 7-bit ksigns
// index), 8 bytes of scales.
void Iq2XsFactors(const uint8_t* b, float* a, float*) {
  const float d = Half(b);
  for (int i = 0; i < 16; ++i)
    a[i] = d * (0.5f + static_cast<float>(b[66 + i / 2] >> (4 * (i % 2)) & 15)) * 0.25f;
}
void Iq2XsCodes(const uint8_t* b, int8_t* q) {
  for (int k = 0; k < 32; ++k) {
    const uint32_t e = U16(b + 2 + 2 * k);
    const uint64_t point = kGgufIq2XsGrid[e & 511];
    const int signs = KSigns(e >> 9, 0);
    for (int i = 0; i < 8; ++i)
      q[8 * k + i] = Signed(static_cast<int>(point >> (8 * i) & 255), signs, i);
  }
}
// IQ2_S: d, 32 grid indices' low 8 bits, 32 bytes of signs, 8 bytes of
// their two high bits, 8 bytes of scales.
void Iq2SFactors(const uint8_t* b, float* a, float*) {
  const float d = Half(b);
  for (int i = 0; i < 16; ++i)
    a[i] = d * (0.5f + static_cast<float>(b[74 + i / 2] >> (4 * (i % 2)) & 15)) * 0.25f;
}
void Iq2SCodes(const uint8_t* b, int8_t* q) {
  for (int k = 0; k < 32; ++k) {
    const uint64_t point = kGgufIq2SGrid[b[2 + k] | (b[66 + k / 4] >> (2 * (k % 4)) & 3) << 8];
    for (int i = 0; i < 8; ++i)
      q[8 * k + i] = Signed(static_cast<int>(point >> (8 * i) & 255), b[34 + k], i);
  }
}

// IQ1_S and IQ1_M: the value is dl (grid + delta), grid -1, 0 or 1 and
// delta +-0.125 per 8 values; (grid + delta) is k / 8 for an odd k, so
// the factor is dl / 8 and the code k: dl (k / 8) and (dl / 8) k round
// alike (scaling by 2^-3 is exact).
void Iq1Codes(int index, bool minus, int8_t* q) {
  const int point = kGgufIq1Grid[index];
  for (int i = 0; i < 8; ++i)
    q[i] = static_cast<int8_t>(8 * ((point >> (2 * i) & 3) - 1) + (minus ? -1 : 1));
}
// IQ1_S: d, 32 grid indices' low 8 bits, then a u16 per 32 values: the
// indices' three high bits each, a 3-bit scale s (dl = d (2s + 1)), and
// the delta's sign in bit 15.
void Iq1SFactors(const uint8_t* b, float* a, float*) {
  const float d = Half(b);
  for (int g = 0; g < 8; ++g)
    a[2 * g] = a[2 * g + 1] =
        d * static_cast<float>(2 * (U16(b + 34 + 2 * g) >> 12 & 7) + 1) * 0.125f;
}
void Iq1SCodes(const uint8_t* b, int8_t* q) {
  for (int k = 0; k < 32; ++k) {
    const uint16_t h = U16(b + 34 + 2 * (k / 4));
    Iq1Codes(b[2 + k] | (h >> (3 * (k % 4)) & 7) << 8, h & 0x8000, q + 8 * k);
  }
}
// IQ1_M: 32 grid indices' low 8 bits, a nibble per index (three high
// bits, the delta's sign), then four u16s: twelve bits of 3-bit scales
// (one per 16 values) each, and in their top nibbles the f16 d.
void Iq1MFactors(const uint8_t* b, float* a, float*) {
  const uint8_t* sc = b + 48;
  const uint16_t d_bits =
      static_cast<uint16_t>(U16(sc) >> 12 | (U16(sc + 2) >> 8 & 0xf0) | (U16(sc + 4) >> 4 & 0xf00) |
                            (U16(sc + 6) & 0xf000));
  const float d = F16ToF32(d_bits);
  for (int i = 0; i < 16; ++i)
    a[i] = d * static_cast<float>(2 * (U16(sc + 2 * (i / 4)) >> (3 * (i % 4)) & 7) + 1) * 0.125f;
}
void Iq1MCodes(const uint8_t* b, int8_t* q) {
  for (int k = 0; k < 32; ++k) {
    const int nibble = b[32 + k / 2] >> (4 * (k % 2)) & 15;
    Iq1Codes(b[k] | (nibble & 7) << 8, nibble & 8, q + 8 * k);
  }
}

using FactorsFn = void (*)(const uint8_t*, float*, float*);
using CodesFn = void (*)(const uint8_t*, int8_t*);
struct Factored {
  FactorsFn factors;
  CodesFn codes;
  int values;
  bool offset;
};
constexpr Factored kQ8_0F{DFactors, Q8_0Codes, 32, false};
constexpr Factored kQ4_0F{DFactors, Q4_0Codes, 32, false};
constexpr Factored kQ4_1F{DMinFactors, Q4_1Codes, 32, true};
constexpr Factored kQ5_0F{DFactors, Q5_0Codes, 32, false};
constexpr Factored kQ5_1F{DMinFactors, Q5_1Codes, 32, true};
constexpr Factored kIq4NlF{DFactors, Iq4NlCodes, 32, false};
constexpr Factored kMxfp4F{Mxfp4Factors, Mxfp4Codes, 32, false};
constexpr Factored kQ2_KF{Q2_KFactors, Q2_KCodes, kQK, true};
constexpr Factored kQ3_KF{Q3_KFactors, Q3_KCodes, kQK, false};
constexpr Factored kQ4_KF{Q45_KFactors, Q4_KCodes, kQK, true};
constexpr Factored kQ5_KF{Q45_KFactors, Q5_KCodes, kQK, true};
constexpr Factored kQ6_KF{Q6_KFactors, Q6_KCodes, kQK, false};
constexpr Factored kIq4XsF{Iq4XsFactors, Iq4XsCodes, kQK, false};
constexpr Factored kIq2XxsF{Iq2XxsFactors, Iq2XxsCodes, kQK, false};
constexpr Factored kIq3XxsF{Iq3XxsFactors, Iq3XxsCodes, kQK, false};
constexpr Factored kIq3SF{Iq3SFactors, Iq3SCodes, kQK, false};
constexpr Factored kIq2XsF{Iq2XsFactors, Iq2XsCodes, kQK, false};
constexpr Factored kIq2SF{Iq2SFactors, Iq2SCodes, kQK, false};
constexpr Factored kIq1SF{Iq1SFactors, Iq1SCodes, kQK, false};
constexpr Factored kIq1MF{Iq1MFactors, Iq1MCodes, kQK, false};

const Factored* FindFactored(uint32_t type) {
  switch (type) {
    case gguf::kQ8_0:
      return &kQ8_0F;
    case gguf::kQ4_0:
      return &kQ4_0F;
    case gguf::kQ4_1:
      return &kQ4_1F;
    case gguf::kQ5_0:
      return &kQ5_0F;
    case gguf::kQ5_1:
      return &kQ5_1F;
    case gguf::kIQ4_NL:
      return &kIq4NlF;
    case gguf::kMXFP4:
      return &kMxfp4F;
    case gguf::kQ2_K:
      return &kQ2_KF;
    case gguf::kQ3_K:
      return &kQ3_KF;
    case gguf::kQ4_K:
      return &kQ4_KF;
    case gguf::kQ5_K:
      return &kQ5_KF;
    case gguf::kQ6_K:
      return &kQ6_KF;
    case gguf::kIQ4_XS:
      return &kIq4XsF;
    case gguf::kIQ2_XXS:
      return &kIq2XxsF;
    case gguf::kIQ3_XXS:
      return &kIq3XxsF;
    case gguf::kIQ3_S:
      return &kIq3SF;
    case gguf::kIQ2_XS:
      return &kIq2XsF;
    case gguf::kIQ2_S:
      return &kIq2SF;
    case gguf::kIQ1_S:
      return &kIq1SF;
    case gguf::kIQ1_M:
      return &kIq1MF;
    default:
      return nullptr;
  }
}

template <const Factored& kF>
void FactoredBlock(const uint8_t* b, float* y) {
  int8_t q[kQK];
  float a[16], m[16];
  kF.factors(b, a, m);
  kF.codes(b, q);
  for (int j = 0; j < kF.values; ++j) {
    const float v = a[j / 16] * static_cast<float>(q[j]);
    y[j] = kF.offset ? v - m[j / 16] : v;
  }
}

void F32(const uint8_t* b, float* y) {
  std::memcpy(y, b, 4);
}
void F16(const uint8_t* b, float* y) {
  *y = Half(b);
}
void Bf16(const uint8_t* b, float* y) {
  *y = format::Bf16ToF32(U16(b));
}

using BlockFn = void (*)(const uint8_t*, float*);
BlockFn Decoder(uint32_t type) {
  switch (type) {
    case gguf::kF32:
      return F32;
    case gguf::kF16:
      return F16;
    case gguf::kBF16:
      return Bf16;
    case gguf::kQ4_0:
      return FactoredBlock<kQ4_0F>;
    case gguf::kQ4_1:
      return FactoredBlock<kQ4_1F>;
    case gguf::kQ5_0:
      return FactoredBlock<kQ5_0F>;
    case gguf::kQ5_1:
      return FactoredBlock<kQ5_1F>;
    case gguf::kQ8_0:
      return FactoredBlock<kQ8_0F>;
    case gguf::kQ2_K:
      return FactoredBlock<kQ2_KF>;
    case gguf::kQ3_K:
      return FactoredBlock<kQ3_KF>;
    case gguf::kQ4_K:
      return FactoredBlock<kQ4_KF>;
    case gguf::kQ5_K:
      return FactoredBlock<kQ5_KF>;
    case gguf::kQ6_K:
      return FactoredBlock<kQ6_KF>;
    case gguf::kIQ4_NL:
      return FactoredBlock<kIq4NlF>;
    case gguf::kIQ4_XS:
      return FactoredBlock<kIq4XsF>;
    case gguf::kIQ2_XXS:
      return FactoredBlock<kIq2XxsF>;
    case gguf::kIQ3_XXS:
      return FactoredBlock<kIq3XxsF>;
    case gguf::kIQ3_S:
      return FactoredBlock<kIq3SF>;
    case gguf::kIQ2_XS:
      return FactoredBlock<kIq2XsF>;
    case gguf::kIQ2_S:
      return FactoredBlock<kIq2SF>;
    case gguf::kIQ1_S:
      return FactoredBlock<kIq1SF>;
    case gguf::kIQ1_M:
      return FactoredBlock<kIq1MF>;
    case gguf::kMXFP4:
      return FactoredBlock<kMxfp4F>;
    default:
      return nullptr;
  }
}

}  // namespace

const int8_t kGgufIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};
const int8_t kGgufE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

bool GgufFactored(uint32_t type) {
  return FindFactored(type) != nullptr;
}

bool GgufFactorsHaveOffset(uint32_t type) {
  const Factored* f = FindFactored(type);
  return f && f->offset;
}

void GgufBlockFactors(uint32_t type, const uint8_t* block, float* a, float* b) {
  FindFactored(type)->factors(block, a, b);
}

void GgufBlockCodes(uint32_t type, const uint8_t* block, int8_t* q) {
  FindFactored(type)->codes(block, q);
}

bool GgufDequantizes(uint32_t type) {
  return Decoder(type) != nullptr;
}

Status GgufDequantize(uint32_t type, std::span<const uint8_t> bytes, std::span<float> out) {
  const BlockFn decode = Decoder(type);
  const gguf::TypeInfo* info = gguf::FindType(type);
  if (!decode || !info) return Status::Error(gguf::TypeName(type) + " is not dequantized yet");
  const uint64_t blocks = bytes.size() / info->type_size;
  if (bytes.size() % info->type_size != 0 || out.size() != blocks * info->block_size)
    return Status::Error(std::string(info->name) + ": " + std::to_string(bytes.size()) +
                         " bytes are not the blocks of " + std::to_string(out.size()) + " values");
  for (uint64_t i = 0; i < blocks; ++i)
    decode(bytes.data() + i * info->type_size, out.data() + i * info->block_size);
  return Status::Ok();
}

Result<std::vector<float>> GgufDequantizeTensor(const gguf::Gguf& g, const gguf::TensorInfo& t) {
  if (!GgufDequantizes(t.type))
    return Status::Error("tensor '" + t.name + "': " + gguf::TypeName(t.type) +
                         " is not dequantized yet");
  auto bytes = g.ReadTensor(t);
  if (!bytes.ok()) return bytes.status();
  std::vector<float> out(t.elements());
  const Status s = GgufDequantize(t.type, *bytes, out);
  if (!s.ok()) return s.Prefixed("tensor '" + t.name + "'");
  return out;
}

}  // namespace waste::kernels

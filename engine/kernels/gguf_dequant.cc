#include "engine/kernels/gguf_dequant.h"

#include <cstring>

#include "engine/format/encoding.h"

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

// IQ4_NL's and IQ4_XS's sixteen levels (ggml-common.h kvalues_iq4nl).
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};
// E2M1's values doubled (MXFP4 multiplies them by half the E8M0 scale).
constexpr int8_t kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The 32-value block types: a block's nibble at value j (0..31): low
// nibbles are values 0..15, high nibbles 16..31.
int Nibble(const uint8_t* qs, int j) {
  return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
}

void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(Nibble(b + 2, j) - 8);
}
void Q4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(Nibble(b + 4, j)) + m;
}
void Q5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 32; ++j)
    y[j] = d * static_cast<float>((Nibble(b + 6, j) | static_cast<int>(qh >> j & 1) << 4) - 16);
}
void Q5_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 32; ++j)
    y[j] = d * static_cast<float>(Nibble(b + 8, j) | static_cast<int>(qh >> j & 1) << 4) + m;
}
void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}
void Iq4Nl(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(kIq4Levels[Nibble(b + 2, j)]);
}
// MXFP4: an E8M0 exponent, then E2M1 nibbles; the scale halved as ggml's
// ggml_e8m0_to_fp32_half builds it (exponents 0 and 1 as subnormals).
void Mxfp4(const uint8_t* b, float* y) {
  const uint32_t e = b[0];
  const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(kE2m1Doubled[Nibble(b + 1, j)]);
}

// The K-quants' 2-bit fields (Q2_K, Q3_K's low bits): the value at j (0..255)
// of 64 bytes: two halves of 128 values, four 32-value shifts each.
int Crumb(const uint8_t* qs, int j) {
  return qs[(j / 128) * 32 + j % 32] >> (2 * (j % 128 / 32)) & 3;
}

void Q2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;   // 16: low nibble scale, high nibble min
  const uint8_t* qs = b + 16;  // 64
  const float d = Half(b + 80), dmin = Half(b + 82);
  for (int j = 0; j < kQK; ++j) {
    const uint8_t s = scales[j / 16];
    const float dl = d * static_cast<float>(s & 15), ml = dmin * static_cast<float>(s >> 4);
    y[j] = dl * static_cast<float>(Crumb(qs, j)) - ml;
  }
}
void Q3_K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;    // 32: bit j/32 of byte j%32 set means no -4
  const uint8_t* qs = b + 32;  // 64
  const uint8_t* sc = b + 96;  // 12: sixteen 6-bit scales, 4 low bits then 2 high
  const float d = Half(b + 108);
  for (int j = 0; j < kQK; ++j) {
    const int i = j / 16;
    const int low = i < 8 ? sc[i] & 15 : sc[i - 8] >> 4;
    const int high = sc[8 + i % 4] >> (2 * (i / 4)) & 3;
    const float dl = d * static_cast<float>((low | high << 4) - 32);
    const int h = hmask[j % 32] >> (j / 32) & 1;
    y[j] = dl * static_cast<float>(Crumb(qs, j) - (h ? 0 : 4));
  }
}
// Q4_K's and Q5_K's eight 6-bit scales and mins packed in 12 bytes.
void ScaleMin(const uint8_t* s, int i, int* sc, int* m) {
  if (i < 4) {
    *sc = s[i] & 63;
    *m = s[i + 4] & 63;
  } else {
    *sc = (s[i + 4] & 15) | ((s[i - 4] >> 6) << 4);
    *m = (s[i + 4] >> 4) | ((s[i] >> 6) << 4);
  }
}
void Q4_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* qs = b + 16;  // 128: sub-block 2c low nibbles, 2c+1 high, of bytes 32c..
  for (int j = 0; j < kQK; ++j) {
    int sc, m;
    ScaleMin(b + 4, j / 32, &sc, &m);
    const int sub = j / 32;
    const int q = qs[(sub / 2) * 32 + j % 32] >> (4 * (sub % 2)) & 15;
    y[j] = d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
  }
}
void Q5_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* qh = b + 16;  // 32: bit sub of byte j%32
  const uint8_t* qs = b + 48;  // 128, as Q4_K's
  for (int j = 0; j < kQK; ++j) {
    int sc, m;
    ScaleMin(b + 4, j / 32, &sc, &m);
    const int sub = j / 32;
    const int q =
        (qs[(sub / 2) * 32 + j % 32] >> (4 * (sub % 2)) & 15) | ((qh[j % 32] >> sub & 1) << 4);
    y[j] = d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
  }
}
void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;        // 128: halves of 64 bytes, low then high nibbles
  const uint8_t* qh = b + 128;  // 64: halves of 32 bytes, four 2-bit shifts
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);  // 16
  const float d = Half(b + 208);
  for (int j = 0; j < kQK; ++j) {
    const int half = j / 128, e = j % 128;
    const int low = ql[half * 64 + e % 64] >> (4 * (e / 64)) & 15;
    const int high = qh[half * 32 + e % 32] >> (2 * (e / 32)) & 3;
    y[j] = d * static_cast<float>(scales[j / 16]) * static_cast<float>((low | high << 4) - 32);
  }
}
void Iq4Xs(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint16_t scales_h = U16(b + 2);
  const uint8_t* scales_l = b + 4;  // 4
  const uint8_t* qs = b + 8;        // 128: 16 bytes per sub-block of 32
  for (int j = 0; j < kQK; ++j) {
    const int sub = j / 32, e = j % 32;
    const int ls = (scales_l[sub / 2] >> (4 * (sub % 2)) & 15) | ((scales_h >> (2 * sub) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    y[j] = dl * static_cast<float>(kIq4Levels[qs[sub * 16 + e % 16] >> (4 * (e / 16)) & 15]);
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
      return Q4_0;
    case gguf::kQ4_1:
      return Q4_1;
    case gguf::kQ5_0:
      return Q5_0;
    case gguf::kQ5_1:
      return Q5_1;
    case gguf::kQ8_0:
      return Q8_0;
    case gguf::kQ2_K:
      return Q2_K;
    case gguf::kQ3_K:
      return Q3_K;
    case gguf::kQ4_K:
      return Q4_K;
    case gguf::kQ5_K:
      return Q5_K;
    case gguf::kQ6_K:
      return Q6_K;
    case gguf::kIQ4_NL:
      return Iq4Nl;
    case gguf::kIQ4_XS:
      return Iq4Xs;
    case gguf::kMXFP4:
      return Mxfp4;
    default:
      return nullptr;
  }
}

}  // namespace

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

// The scalar encodings every kernel is checked against: half and bfloat16
// conversion, grouped quantization, VQ4P packing, crc32.
#include "engine/format/encoding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

namespace waste::format {
namespace {

TEST(Encoding, EveryHalfSurvivesARoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(Encoding, HalfRoundsToNearestEven) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);               // halfway past the largest half: infinity
  EXPECT_EQ(F32ToF16(1.0f + 1.0f / 2048), 0x3c00);     // tie between 0x3c00 and 0x3c01: even
  EXPECT_EQ(F32ToF16(1.0f + 3.0f / 2048), 0x3c02);     // tie between 0x3c01 and 0x3c02: even
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie with zero: even
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
}

TEST(Encoding, Bfloat16) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToBf16(f), h);
  }
  EXPECT_EQ(F32ToBf16(1.0f + 1.0f / 256), 0x3f80);  // tie: even
  EXPECT_EQ(F32ToBf16(1.0f + 3.0f / 256), 0x3f82);
}

class Grouped : public ::testing::TestWithParam<std::tuple<int, int64_t>> {};

TEST_P(Grouped, DequantizeIsWithinHalfAStep) {
  const auto [bits, cols] = GetParam();
  const GroupedShape s{bits, 128, 5, cols};
  std::mt19937 rng(bits * 1000 + static_cast<int>(cols));
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::vector<float> x(static_cast<size_t>(s.rows * cols));
  for (float& v : x) v = u(rng);
  std::vector<uint8_t> payload(static_cast<size_t>(s.payload_bytes()));
  std::vector<uint16_t> scales(static_cast<size_t>(s.rows * s.groups_per_row()));
  QuantizeGrouped(s, x.data(), payload.data(), scales.data());
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < s.rows; ++r) {
    DequantizeGroupedRow(s, payload.data(), scales.data(), r, row.data());
    for (int64_t i = 0; i < cols; ++i) {
      const float step = F16ToF32(scales[r * s.groups_per_row() + i / 128]);
      // Half a step of rounding, plus the f16 rounding of the scale itself.
      EXPECT_NEAR(row[i], x[r * cols + i], 0.5f * step + 0.004f * std::fabs(x[r * cols + i]))
          << "bits " << bits << " row " << r << " col " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, Grouped,
                         ::testing::Combine(::testing::Values(8, 4, 3),
                                            ::testing::Values(int64_t{1}, int64_t{127},
                                                              int64_t{128}, int64_t{130},
                                                              int64_t{384})));

TEST(Encoding, Q3RowsKeepTheirGuardByte) {
  const GroupedShape s{3, 128, 3, 128};
  EXPECT_EQ(s.row_bytes(), 128 * 3 / 8 + 1);
  std::vector<float> x(static_cast<size_t>(3 * 128));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 8) - 4);
  std::vector<uint8_t> payload(static_cast<size_t>(s.payload_bytes()));
  std::vector<uint16_t> scales(3);
  QuantizeGrouped(s, x.data(), payload.data(), scales.data());
  for (int r = 0; r < 3; ++r)  // amax is 4 and qmax 3: the codes are round(v * 3/4)
    for (int i = 0; i < 128; ++i)
      EXPECT_EQ(Q3At(payload.data() + r * s.row_bytes(), i),
                std::clamp(static_cast<int>(std::lround((i % 8 - 4) * 0.75f)), -4, 3));
}

TEST(Encoding, Vq4PackingMatchesTheFormatsBitOrder) {
  const uint8_t s[4] = {0x01, 0x3f, 0x22, 0x15};
  uint8_t b[3];
  PackVq4(s, b);
  // byte0 = s0 | s1<<6, byte1 = s1>>2 | s2<<4, byte2 = s2>>4 | s3<<2
  EXPECT_EQ(b[0], static_cast<uint8_t>(0x01 | (0x3f << 6)));
  EXPECT_EQ(b[1], static_cast<uint8_t>((0x3f >> 2) | (0x22 << 4)));
  EXPECT_EQ(b[2], static_cast<uint8_t>((0x22 >> 4) | (0x15 << 2)));
  for (int v = 0; v < 1 << 12; ++v) {  // a spread of all four fields
    const uint8_t in[4] = {static_cast<uint8_t>(v & 63), static_cast<uint8_t>((v * 7) & 63),
                           static_cast<uint8_t>((v >> 6) & 63),
                           static_cast<uint8_t>((v * 13) & 63)};
    uint8_t packed[3], out[4];
    PackVq4(in, packed);
    UnpackVq4(packed, out);
    EXPECT_EQ(0, std::memcmp(in, out, 4));
  }
}

TEST(Encoding, Crc32IsZlibs) {
  const std::string_view check = "123456789";
  EXPECT_EQ(Crc32({reinterpret_cast<const uint8_t*>(check.data()), check.size()}), 0xCBF43926u);
  EXPECT_EQ(Crc32({}), 0u);
}

}  // namespace
}  // namespace waste::format

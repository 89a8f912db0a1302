// Decoding of the quantized weight types checkpoints ship, value by value.
// Each is the reference definition, checked on every code against PyTorch
// (tests/fixtures/convert/dequant.json, written by tools/convert_fixtures/).
//
// - FP8 E4M3 ("fn": no infinities): sign, 4 exponent bits (bias 7), 3
//   mantissa bits; exponent 0 is subnormal; S.1111.111 is NaN. DeepSeek-V3
//   scales it per 128x128 block by `weight_scale_inv` (float32).
// - MXFP4 (OCP microscaling): engine/format/encoding.h's E2m1ToF32 and
//   E8m0ToF32, which the expert record of that format shares.
#pragma once

#include <cstdint>

namespace waste::convert {

float Fp8E4m3ToF32(uint8_t code);

}  // namespace waste::convert

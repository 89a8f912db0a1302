// Decoding of the quantized weight types checkpoints ship, value by value.
// Each is the reference definition, checked on every code against PyTorch
// (tests/fixtures/convert/dequant.json, written by tools/convert_fixtures/).
//
// - FP8 E4M3 ("fn": no infinities): sign, 4 exponent bits (bias 7), 3
//   mantissa bits; exponent 0 is subnormal; S.1111.111 is NaN. DeepSeek-V3
//   scales it per 128x128 block by `weight_scale_inv` (float32).
// - MXFP4 (OCP microscaling, as compressed-tensors' mxfp4-pack-quantized
//   writes it): E2M1 values, two per byte, low nibble first; one E8M0 scale
//   per 32 values of a row: 2^(e - 127), 255 is NaN.
#pragma once

#include <cstdint>

namespace waste::convert {

float Fp8E4m3ToF32(uint8_t code);
float E2m1ToF32(uint8_t nibble);  // the low 4 bits
float E8m0ToF32(uint8_t code);

}  // namespace waste::convert

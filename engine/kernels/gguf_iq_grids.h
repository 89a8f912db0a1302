// The grids of ggml's 1-3 bit IQ types (ggml-common.h's iq3xxs_grid,
// iq3s_grid, iq2xxs_grid, iq2xs_grid, iq2s_grid, iq1s_grid), data from the
// `gguf` package (tools/gguf/make_iq_grids.py writes gguf_iq_grids.cc):
// each point one integer whose bytes are its values (unsigned magnitudes;
// the blocks carry the signs), value i in byte i; IQ1's values -1, 0, 1 as
// 0, 1, 2 in bits 2i and 2i + 1.
#pragma once

#include <cstdint>

namespace waste::kernels {

extern const uint32_t kGgufIq3XxsGrid[256];  // 4 values of 4, 12, .., 52, 62
extern const uint32_t kGgufIq3SGrid[512];    // 4 values of 1, 3, .., 15
extern const uint64_t kGgufIq2XxsGrid[256];  // 8 values of 8, 25, 43
extern const uint64_t kGgufIq2XsGrid[512];   // 8 values of 8, 25, 43
extern const uint64_t kGgufIq2SGrid[1024];   // 8 values of 8, 25, 43
extern const uint16_t kGgufIq1Grid[2048];    // IQ1_S's and IQ1_M's: 8 values of -1, 0, 1

}  // namespace waste::kernels

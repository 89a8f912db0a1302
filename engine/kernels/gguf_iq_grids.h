// The grids of ggml's 1-3 bit IQ types (ggml-common.h's iq2xxs_grid and
// iq3xxs_grid), data from the `gguf` package (tools/gguf/make_iq_grids.py
// writes gguf_iq_grids.cc): each point one integer whose bytes are its
// values (unsigned magnitudes; the blocks carry the signs), value i in
// byte i.
#pragma once

#include <cstdint>

namespace waste::kernels {

extern const uint64_t kGgufIq2XxsGrid[256];  // 8 values of 8, 25, 43
extern const uint32_t kGgufIq3XxsGrid[256];  // 4 values of 4, 12, .., 52, 62

}  // namespace waste::kernels

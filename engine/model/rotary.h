// Rotary position embedding: the pairs (2i, 2i+1) of the rope dims rotate by
// pos * inv_freq[i] (HF DeepseekV3's rope_interleave: its de-interleave then
// rotate_half is this rotation with the output dims reordered, which no dot
// product can tell apart). YaRN, when the config asks for it, blends the
// inverse frequencies and scales attention's softmax.
#pragma once

#include <vector>

#include "engine/format/model_config.h"

namespace waste {

struct Rotary {
  std::vector<float> inv_freq;  // [dims / 2]; empty: nothing rotates
  // What multiplies the softmax scale: YaRN's mscale(mscale_all_dim)^2, else 1.
  float softmax_factor = 1.f;

  // Rotates the first 2 * inv_freq.size() values of v for position pos.
  void Apply(float* v, int pos) const;
};

// The rotation of `dims` rope dims with base `theta` and YaRN settings `yarn`
// (plain RoPE when yarn.factor <= 1), computed in float32 as HF does.
Rotary MakeRotary(int dims, double theta, const YarnConfig& yarn);

}  // namespace waste

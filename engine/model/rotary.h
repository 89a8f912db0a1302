// Rotary position embedding: pair i of the rope dims rotates by
// pos * inv_freq[i]. MLA's pairs are (2i, 2i+1) (HF DeepseekV3's
// rope_interleave: its de-interleave then rotate_half is this rotation with
// the output dims reordered, which no dot product can tell apart); GQA's are
// (i, i + d/2) of the d rotated dims (HF's rotate_half). YaRN, when the
// config asks for it, blends the inverse frequencies and scales attention:
// MLA's softmax (softmax_factor) or GQA's cos and sin (cos_sin_factor).
#pragma once

#include <vector>

#include "engine/format/model_config.h"

namespace waste {

struct Rotary {
  std::vector<float> inv_freq;  // [dims / 2]; empty: nothing rotates
  // What multiplies the softmax scale: YaRN's mscale(mscale_all_dim)^2, else 1.
  float softmax_factor = 1.f;
  bool rotate_half = false;    // pairs (i, i + d/2), not (2i, 2i+1)
  float cos_sin_factor = 1.f;  // rotate_half: what multiplies cos and sin (HF's attention_factor)

  // Rotates the first 2 * inv_freq.size() values of v for position pos.
  void Apply(float* v, int pos) const;
};

// The rotation of `dims` rope dims with base `theta` and YaRN settings `yarn`
// (plain RoPE when yarn.factor <= 1), computed in float32 as HF does.
Rotary MakeRotary(int dims, double theta, const YarnConfig& yarn);

}  // namespace waste

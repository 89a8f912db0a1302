// Choosing the next token from logits: greedy, or temperature with top-k and
// top-p, from a seeded generator (same seed, same choices).
#pragma once

#include <cstdint>
#include <span>

namespace waste {

struct SamplerOptions {
  float temperature = 0.f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;            // 0: no limit
  float top_p = 1.f;        // nucleus: smallest set whose probability reaches top_p
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& opt);
  int Sample(std::span<const float> logits);

 private:
  double Uniform();  // [0, 1)
  SamplerOptions opt_;
  uint64_t state_;
};

}  // namespace waste

// Choosing the next token from logits: greedy, or temperature with top-k and
// top-p, from a seeded generator (same seed, same choices). Before either,
// OpenAI's adjustments: a bias added to chosen tokens' logits (logit_bias),
// and penalties on the tokens this sampler has already chosen:
//   logit[j] += bias[j] - count[j] * frequency_penalty - (count[j] > 0) * presence_penalty
// where count[j] is how often Sample returned j. The caller's logits are
// never changed (their log-probabilities stay the model's own).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace waste {

struct SamplerOptions {
  float temperature = 0.f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;            // 0: no limit
  float top_p = 1.f;        // nucleus: smallest set whose probability reaches top_p
  uint64_t seed = 0;
  // (token id, bias): ids outside the logits are skipped (the API refuses them).
  std::vector<std::pair<int32_t, float>> logit_bias;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& opt);
  // The next token; counted for the penalties.
  int Sample(std::span<const float> logits);

 private:
  // From the logits as adjusted.
  int Choose(std::span<const float> logits);
  double Uniform();  // [0, 1)
  SamplerOptions opt_;
  uint64_t state_;
  std::unordered_map<int32_t, int> counts_;  // chosen tokens, while a penalty is set
  std::vector<float> adjusted_;              // the logits with bias and penalties
};

}  // namespace waste

#include "engine/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace waste {

Sampler::Sampler(const SamplerOptions& opt) : opt_(opt), state_(opt.seed ^ 0x853c49e6748fea9bull) {}

double Sampler::Uniform() {  // splitmix64
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

int Sampler::Sample(std::span<const float> logits) {
  const bool penalized = opt_.presence_penalty != 0.f || opt_.frequency_penalty != 0.f;
  std::span<const float> l = logits;
  if (!opt_.logit_bias.empty() || !counts_.empty()) {
    adjusted_.assign(logits.begin(), logits.end());
    const auto in_range = [&](int32_t id) {
      return id >= 0 && static_cast<size_t>(id) < logits.size();
    };
    for (const auto& [id, bias] : opt_.logit_bias)
      if (in_range(id)) adjusted_[id] += bias;
    for (const auto& [id, count] : counts_)
      if (in_range(id))
        adjusted_[id] -= static_cast<float>(count) * opt_.frequency_penalty + opt_.presence_penalty;
    l = adjusted_;
  }
  const int token = Choose(l);
  if (penalized) ++counts_[token];
  return token;
}

int Sampler::Choose(std::span<const float> logits) {
  const int n = static_cast<int>(logits.size());
  if (opt_.temperature <= 0.f) {
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  int keep = opt_.top_k > 0 ? std::min(opt_.top_k, n) : n;
  std::vector<double> p(keep);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int i = 0; i < keep; ++i) sum += p[i] = std::exp((logits[idx[i]] - mx) / opt_.temperature);
  if (opt_.top_p < 1.f) {
    double acc = 0;
    for (int i = 0; i < keep; ++i) {
      acc += p[i] / sum;
      if (acc >= opt_.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  double r = Uniform() * sum;
  for (int i = 0; i < keep; ++i) {
    r -= p[i];
    if (r < 0) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace waste

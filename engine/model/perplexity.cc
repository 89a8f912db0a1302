#include "engine/model/perplexity.h"

#include <algorithm>
#include <string>
#include <vector>

namespace waste {

double TokenNll(const float* logits, int vocab, int token) {
  const float mx = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return std::log(sum) - (static_cast<double>(logits[token]) - mx);
}

Result<PerplexityScore> ScorePerplexity(
    Model& m, std::span<const int> ids, int window, int max_windows,
    const std::function<void(size_t, std::span<const float>)>& on_window) {
  if (window < 2) return Status::Error("the window must be at least 2 tokens");
  if (ids.size() < 2) return Status::Error("at least 2 tokens are needed to score one");
  const int V = m.config().vocab;
  for (int id : ids)
    if (id < 0 || id >= V)
      return Status::Error("token id " + std::to_string(id) + " is outside the vocabulary");
  PerplexityScore score;
  std::vector<float> logits;
  for (size_t start = 0; start + 1 < ids.size(); start += static_cast<size_t>(window)) {
    if (max_windows > 0 && score.windows == max_windows) break;
    const size_t n = std::min(ids.size() - start, static_cast<size_t>(window));
    if (n < 2) break;
    Session s = m.NewSession(static_cast<int>(n));
    logits.clear();
    if (Status st = m.Forward(s, ids.subspan(start, n), nullptr, &logits); !st.ok()) return st;
    for (size_t t = 0; t + 1 < n; ++t)
      score.nll += TokenNll(logits.data() + t * static_cast<size_t>(V), V, ids[start + t + 1]);
    score.scored += n - 1;
    ++score.windows;
    if (on_window) on_window(start, logits);
  }
  return score;
}

}  // namespace waste

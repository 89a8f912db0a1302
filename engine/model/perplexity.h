// Perplexity of a model on a sequence of tokens.
//
// The sequence is cut into consecutive windows of `window` tokens (the last
// may be shorter); each window runs in a fresh session, and every token of
// a window after its first is scored by the logits at the position before
// it: -log softmax(logits)[token], in double. A window's first token is not
// scored (nothing precedes it in that session), so n tokens in w windows
// score n - w.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "engine/model/model.h"

namespace waste {

struct PerplexityScore {
  uint64_t scored = 0;  // tokens predicted
  double nll = 0;       // their summed negative log-likelihood, in nats
  int windows = 0;

  double mean_nll() const { return scored ? nll / static_cast<double>(scored) : 0.0; }
  double perplexity() const { return std::exp(mean_nll()); }
};

// -log softmax(logits)[token] over `vocab` logits, in double.
double TokenNll(const float* logits, int vocab, int token);

// Scores `ids` in windows of `window` tokens (>= 2), at most `max_windows`
// of them (0: all). `on_window`, when set, gets each window's start in
// `ids` and its logits ([window tokens][vocab]) before the next runs.
Result<PerplexityScore> ScorePerplexity(
    Model& m, std::span<const int> ids, int window, int max_windows,
    const std::function<void(size_t start, std::span<const float> logits)>& on_window = {});

}  // namespace waste

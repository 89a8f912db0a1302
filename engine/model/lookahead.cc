// The router lookahead: guessing a layer's experts ahead of its router, hinting
// the guesses and scoring them against what the layer demanded.

#include <algorithm>
#include <tuple>
#include <vector>

#include "engine/model/layer.h"
#include "engine/model/router.h"

namespace waste {

std::vector<int> Model::GuessExperts(int L, int T, const float* h, size_t cap) {
  const Layer& l = *layers_[L];
  const int E = c_.n_experts, hid = c_.hidden;
  // Own buffers: nothing the real path computes is touched.
  std::vector<float> logits(E);               // [n_experts]: one token's router logits
  std::vector<int> votes(E, 0), ranks(E, 0);  // [n_experts]: tokens naming it, sum of its ranks
  Routing r;
  for (int t = 0; t < T; ++t) {
    MatVec(*l.router, h + static_cast<size_t>(t) * hid, logits.data());
    Route(guess_config_, logits, l.router_bias, &r);
    for (int j = 0; j < r.count; ++j) {
      ++votes[r.expert[j]];
      ranks[r.expert[j]] += j;
    }
  }
  std::vector<int> named;
  for (int e = 0; e < E; ++e)
    if (votes[e] > 0) named.push_back(e);
  // Most voted first, then best ranked: what a capped hint keeps.
  std::sort(named.begin(), named.end(), [&](int a, int b) {
    return std::tuple(-votes[a], ranks[a], a) < std::tuple(-votes[b], ranks[b], b);
  });
  if (named.size() > cap) named.resize(cap);
  return named;
}

void Model::HintGuess(int L) {
  if (guess_[L].empty()) return;
  experts_->Hint(L, guess_[L], HintKind::kLookahead);
  lookahead_stats_.hinted += guess_[L].size();
}

void Model::ScoreGuesses(int L, std::span<const int> wanted) {
  auto score = [&](std::vector<int>& guess, LookaheadStats& st) {
    if (guess.empty()) return;
    for (int e : guess) st.used += std::binary_search(wanted.begin(), wanted.end(), e);
    st.demanded += wanted.size();
    guess.clear();
  };
  score(guess_[L], lookahead_stats_);
  if (L == first_moe_) score(next_token_guess_, next_token_stats_);
}

}  // namespace waste

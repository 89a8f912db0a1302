// The router lookahead: guessing a layer's experts ahead of its router, hinting
// the guesses and scoring them against what the layer demanded (Lookahead).

#include <algorithm>
#include <tuple>
#include <vector>

#include "engine/model/moe.h"
#include "engine/model/router.h"

namespace waste {

Lookahead::Lookahead(const ModelConfig& c, const ModelOptions& opt, ExpertSource* experts,
                     int first_moe)
    : experts_(experts), first_moe_(first_moe), guess_config_(c) {
  // The lookahead ranks experts as Route does, for more of them than top_k;
  // with grouped top-k only the experts of the kept groups can be chosen.
  int eligible = c.n_experts;
  if (c.n_group > 1 && c.topk_group < c.n_group)
    eligible = c.topk_group * (c.n_experts / c.n_group);
  guess_config_.top_k = std::min({opt.lookahead, eligible, 64});  // Routing holds 64
  guess_.resize(c.n_layers);
}

std::vector<int> Lookahead::GuessExperts(LayerContext& ctx, const MoeLayer& moe, int T,
                                         const float* h, size_t cap) const {
  const int E = ctx.c.n_experts;
  // Own buffers: nothing the real path computes is touched.
  const size_t n = static_cast<size_t>(E);
  std::vector<float> logits(T * n);           // [T][n_experts]: the router's logits
  std::vector<int> votes(E, 0), ranks(E, 0);  // [n_experts]: tokens naming it, sum of its ranks
  Routing r;
  moe.RouterLogits(ctx, T, h, logits.data());
  for (int t = 0; t < T; ++t) {
    Route(guess_config_, std::span<const float>(logits).subspan(t * n, n), moe.router_bias(), &r);
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

void Lookahead::Guess(LayerContext& ctx, const MoeLayer& moe, int L, int T, const float* h,
                      size_t cap) {
  guess_[L] = GuessExperts(ctx, moe, T, h, cap);
}

void Lookahead::GuessNextToken(LayerContext& ctx, const MoeLayer& moe, const float* h,
                               size_t cap) {
  next_token_guess_ = GuessExperts(ctx, moe, 1, h, cap);
}

void Lookahead::HintNextToken() {
  if (next_token_guess_.empty()) return;
  experts_->Hint(first_moe_, next_token_guess_, HintKind::kLookahead);
  next_token_stats_.hinted += next_token_guess_.size();
}

void Lookahead::Hint(int L) {
  if (guess_[L].empty()) return;
  experts_->Hint(L, guess_[L], HintKind::kLookahead);
  stats_.hinted += guess_[L].size();
}

void Lookahead::Score(int L, std::span<const int> wanted) {
  auto score = [&](std::vector<int>& guess, LookaheadStats& st) {
    if (guess.empty()) return;
    for (int e : guess) st.used += std::binary_search(wanted.begin(), wanted.end(), e);
    st.demanded += wanted.size();
    guess.clear();
  };
  score(guess_[L], stats_);
  if (L == first_moe_) score(next_token_guess_, next_token_stats_);
}

}  // namespace waste

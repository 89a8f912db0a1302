#include "engine/model/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace waste {

void Route(const ModelConfig& c, std::span<const float> logits, std::span<const float> bias,
           Routing* out) {
  const int n = c.n_experts;
  if (c.softmax_topk) {  // GPT-OSS: top-k of the logits, softmax over those k
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + c.top_k, idx.end(), [&](int x, int y) {
      return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
    });
    const float mx = logits[idx[0]];
    float sum = 0.f;
    for (int i = 0; i < c.top_k; ++i) sum += out->weight[i] = std::exp(logits[idx[i]] - mx);
    out->count = c.top_k;
    for (int i = 0; i < c.top_k; ++i) {
      out->expert[i] = idx[i];
      out->weight[i] = out->weight[i] / sum * c.routed_scale;
    }
    return;
  }
  std::vector<float> score(n), choice(n);
  if (c.sigmoid_router) {
    for (int e = 0; e < n; ++e) score[e] = 1.f / (1.f + std::exp(-logits[e]));
  } else {
    const float mx = *std::max_element(logits.begin(), logits.begin() + n);
    float sum = 0.f;
    for (int e = 0; e < n; ++e) sum += score[e] = std::exp(logits[e] - mx);
    for (int e = 0; e < n; ++e) score[e] /= sum;
  }
  for (int e = 0; e < n; ++e) choice[e] = score[e] + (bias.empty() ? 0.f : bias[e]);

  // Grouped selection: experts outside the best groups cannot be chosen.
  if (c.n_group > 1 && c.topk_group < c.n_group) {
    const int per = n / c.n_group;
    std::vector<float> group_score(c.n_group);
    for (int g = 0; g < c.n_group; ++g) {
      float a = -INFINITY, b = -INFINITY;  // two best of the group
      for (int e = g * per; e < (g + 1) * per; ++e) {
        if (choice[e] > a)
          b = a, a = choice[e];
        else if (choice[e] > b)
          b = choice[e];
      }
      group_score[g] = a + (per > 1 ? b : 0.f);
    }
    std::vector<int> order(c.n_group);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return group_score[x] > group_score[y]; });
    for (int i = c.topk_group; i < c.n_group; ++i)
      for (int e = order[i] * per; e < (order[i] + 1) * per; ++e) choice[e] = -INFINITY;
  }

  // Top-k by biased score; ties go to the lower expert id.
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + c.top_k, idx.end(), [&](int x, int y) {
    return choice[x] > choice[y] || (choice[x] == choice[y] && x < y);
  });
  float sum = 0.f;
  for (int i = 0; i < c.top_k; ++i) sum += score[idx[i]];
  out->count = c.top_k;
  for (int i = 0; i < c.top_k; ++i) {
    out->expert[i] = idx[i];
    float w = score[idx[i]];
    if (c.renormalize && sum > 0.f) w /= sum;
    out->weight[i] = w * c.routed_scale;
  }
}

}  // namespace waste

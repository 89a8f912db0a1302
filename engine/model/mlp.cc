// The dense MLP, down(SiLU(gate(h)) * up(h)) (K3: SiTU in place of SiLU-and-
// multiply): a dense layer's feed-forward and a MoE layer's shared expert
// (Model::DenseMlp).

#include <span>
#include <vector>

#include "engine/model/layer.h"
#include "engine/model/norms.h"

namespace waste {

MlpWeights ResolveMlp(const Trunk& t, const std::string& prefix) {
  return {&t.Matrix(prefix + "gate_proj.weight"), &t.Matrix(prefix + "up_proj.weight"),
          &t.Matrix(prefix + "down_proj.weight")};
}

void Model::DenseMlp(int L, std::span<const float* const> hs, std::span<float* const> outs) {
  const Layer& l = *layers_[L];
  const size_t n = hs.size();
  const int64_t inter = l.gate->rows;
  std::vector<float> g(n * inter), u(n * inter);  // [n][inter]
  const std::vector<float*> gs = RowPointers(g.data(), n, static_cast<size_t>(inter)),
                            us = RowPointers(u.data(), n, static_cast<size_t>(inter));
  MatVecsMany({{l.gate, hs, gs}, {l.up, hs, us}});
  for (size_t t = 0; t < n; ++t) {
    float* gt = gs[t];
    const float* ut = us[t];
    if (c_.situ)
      for (int64_t i = 0; i < inter; ++i) gt[i] = Situ(gt[i], ut[i], c_.situ_beta, c_.situ_linear_beta);
    else
      for (int64_t i = 0; i < inter; ++i) gt[i] = Silu(gt[i]) * ut[i];
  }
  MatVecMany(*l.down, RowPointers<const float>(g.data(), n, static_cast<size_t>(inter)), outs);
  if (l.shared_gate) {  // Qwen3-Next's gated shared expert
    std::vector<float> gate(n);
    MatVecMany(*l.shared_gate, hs, RowPointers(gate.data(), n, 1));
    for (size_t t = 0; t < n; ++t) {
      const float s = Sigmoid(gate[t]);
      for (int i = 0; i < c_.hidden; ++i) outs[t][i] *= s;
    }
  }
}

}  // namespace waste

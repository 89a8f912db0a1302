// The dense MLP, down(SiLU(gate(h)) * up(h)) (K3: SiTU in place of SiLU-and-
// multiply): a dense layer's feed-forward and a MoE layer's shared expert
// (Mlp).

#include <span>
#include <vector>

#include "engine/model/layer.h"
#include "engine/model/norms.h"

namespace waste {

Mlp::Mlp(const Trunk& t, const std::string& prefix, const kernels::MatrixView* shared_gate)
    : gate_(&t.Matrix(prefix + "gate_proj.weight")),
      up_(&t.Matrix(prefix + "up_proj.weight")),
      down_(&t.Matrix(prefix + "down_proj.weight")),
      shared_gate_(shared_gate) {}

void Mlp::Run(LayerContext& ctx, std::span<const float* const> hs,
              std::span<float* const> outs) const {
  const ModelConfig& c = ctx.c;
  const size_t n = hs.size();
  const int64_t inter = gate_->rows;
  std::vector<float> g(n * inter), u(n * inter);  // [n][inter]
  const std::vector<float*> gs = RowPointers(g.data(), n, static_cast<size_t>(inter)),
                            us = RowPointers(u.data(), n, static_cast<size_t>(inter));
  ctx.MatVecsMany({{gate_, hs, gs}, {up_, hs, us}});
  for (size_t t = 0; t < n; ++t) {
    float* gt = gs[t];
    const float* ut = us[t];
    if (c.situ)
      for (int64_t i = 0; i < inter; ++i)
        gt[i] = Situ(gt[i], ut[i], c.situ_beta, c.situ_linear_beta);
    else
      for (int64_t i = 0; i < inter; ++i) gt[i] = Silu(gt[i]) * ut[i];
  }
  ctx.MatVecMany(*down_, RowPointers<const float>(g.data(), n, static_cast<size_t>(inter)), outs);
  if (shared_gate_) {  // Qwen3-Next's gated shared expert
    std::vector<float> gate(n);
    ctx.MatVecMany(*shared_gate_, hs, RowPointers(gate.data(), n, 1));
    for (size_t t = 0; t < n; ++t) {
      const float s = Sigmoid(gate[t]);
      for (int i = 0; i < c.hidden; ++i) outs[t][i] *= s;
    }
  }
}

}  // namespace waste

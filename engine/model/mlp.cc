// The dense MLP, down(SiLU(gate(h)) * up(h)) (K3: SiTU in place of SiLU-and-
// multiply): a dense layer's feed-forward and a MoE layer's shared expert
// (Model::DenseMlp).

#include <vector>

#include "engine/model/layer.h"
#include "engine/model/norms.h"

namespace waste {

MlpWeights ResolveMlp(const Trunk& t, const std::string& prefix) {
  return {&t.Matrix(prefix + "gate_proj.weight"), &t.Matrix(prefix + "up_proj.weight"),
          &t.Matrix(prefix + "down_proj.weight")};
}

void Model::DenseMlp(int L, const float* h, float* out) {
  const Layer& l = *layers_[L];
  const int64_t inter = l.gate->rows;
  std::vector<float> g(inter), u(inter);
  MatVecs({{l.gate, h, g.data()}, {l.up, h, u.data()}});
  if (c_.situ)
    for (int64_t i = 0; i < inter; ++i) g[i] = Situ(g[i], u[i], c_.situ_beta, c_.situ_linear_beta);
  else
    for (int64_t i = 0; i < inter; ++i) g[i] = Silu(g[i]) * u[i];
  MatVec(*l.down, g.data(), out);
  if (l.shared_gate) {  // Qwen3-Next's gated shared expert
    float gate = 0.f;
    MatVec(*l.shared_gate, h, &gate);
    const float s = Sigmoid(gate);
    for (int i = 0; i < c_.hidden; ++i) out[i] *= s;
  }
}

}  // namespace waste

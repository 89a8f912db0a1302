// Model::Layer, private to engine/model: what the forward pass's files
// (model.cc, moe.cc) read of one layer's weights.
#pragma once

#include "engine/format/model_config.h"
#include "engine/kernels/matvec.h"
#include "engine/model/model.h"

namespace waste {

// The resolved weights of one layer: kernel views, no name lookups at run time.
struct Model::Layer {
  LayerKind kind;
  bool moe = false;
  const float* in_norm = nullptr;
  const float* post_norm = nullptr;
  // KDA
  const kernels::MatrixView *q = nullptr, *k = nullptr, *v = nullptr, *b = nullptr;
  const kernels::MatrixView *f_a = nullptr, *f_b = nullptr, *g_a = nullptr, *g_b = nullptr;
  const kernels::MatrixView* o = nullptr;
  const float* conv[3] = {};       // [C][kernel]
  const float* a_log = nullptr;    // [heads]
  const float* dt_bias = nullptr;  // [C]
  const float* o_norm = nullptr;   // [head_dim]
  // MLA (o above is shared)
  const kernels::MatrixView *q_a = nullptr, *q_b = nullptr, *q_proj = nullptr;
  const float* q_a_norm = nullptr;
  const kernels::MatrixView *kv_a = nullptr, *kv_b = nullptr;
  const float* kv_a_norm = nullptr;
  // FFN
  const kernels::MatrixView *gate = nullptr, *up = nullptr, *down = nullptr;  // dense or shared
  const kernels::MatrixView* router = nullptr;
  const float* router_bias = nullptr;
};

}  // namespace waste

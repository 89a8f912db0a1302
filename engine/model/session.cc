// A session's memory: each layer kind's state, laid out and sized (Model::NewSession).

#include <algorithm>
#include <new>

#include "engine/model/layer.h"

namespace waste {

uint64_t Session::state_bytes() const {
  uint64_t n = 0;
  for (const auto& v : kda_state) n += v.size() * 4;
  for (const auto& v : conv_ring) n += v.size() * 4;
  for (const auto& v : latent_kv) n += v.size() * 4;
  for (const auto& v : kda_spare) n += v.size() * 4;
  for (const auto& v : conv_spare) n += v.size() * 4;
  return n;
}

Session Model::NewSession(int max_context) const {
  Session s;
  s.max_context = max_context;
  const size_t kda = static_cast<size_t>(c_.kda_heads) * c_.kda_head_dim * c_.kda_head_dim;
  const size_t ring = static_cast<size_t>(3) * (c_.conv_kernel - 1) * c_.kda_width();
  const size_t kv = static_cast<size_t>(max_context) * (c_.kv_lora + c_.qk_rope);
  // Each layer's part starts on a 64-byte line.
  auto line = [](size_t floats) { return (floats + 15) / 16 * 16; };
  // What each layer kind keeps: KDA its recurrent state and conv ring, and
  // their spares (model.h), MLA its latent cache.
  auto layer_floats = [&](LayerKind kind) {
    switch (kind) {
      case LayerKind::kKda:
        return 2 * (line(kda) + line(ring));
      case LayerKind::kMla:
        return line(kv);
    }
    return size_t{0};
  };
  size_t total = 0;
  for (int L = 0; L < c_.n_layers; ++L) total += layer_floats(layers_[L]->plan.attention);
  auto memory = Region::Allocate(std::max<size_t>(total, 1) * sizeof(float), /*populate=*/false);
  if (!memory.ok()) throw std::bad_alloc();
  s.memory = std::move(*memory);
  float* next = reinterpret_cast<float*>(s.memory.data());
  auto take = [&](size_t floats) {
    std::span<float> part(next, floats);
    next += line(floats);
    return part;
  };
  s.kda_state.resize(c_.n_layers);
  s.conv_ring.resize(c_.n_layers);
  s.latent_kv.resize(c_.n_layers);
  s.kda_spare.resize(c_.n_layers);
  s.conv_spare.resize(c_.n_layers);
  for (int L = 0; L < c_.n_layers; ++L) {
    switch (layers_[L]->plan.attention) {
      case LayerKind::kKda:
        s.kda_state[L] = take(kda);
        s.conv_ring[L] = take(ring);
        s.kda_spare[L] = take(kda);
        s.conv_spare[L] = take(ring);
        break;
      case LayerKind::kMla:
        s.latent_kv[L] = take(kv);
        break;
    }
  }
  return s;
}

}  // namespace waste

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
  for (const auto& v : kv_cache) n += v.size() * 4;
  for (const auto& v : kda_spare) n += v.size() * 4;
  for (const auto& v : conv_spare) n += v.size() * 4;
  return n;
}

namespace {

// The floats of a per-position cache (MLA's latent KV, GQA's K/V) below
// `position`: it holds max_context rows.
size_t KvUsed(const Session& s, std::span<const float> cache, int position) {
  if (cache.empty() || s.max_context == 0) return 0;
  return cache.size() / static_cast<size_t>(s.max_context) * static_cast<size_t>(position);
}

}  // namespace

SessionSnapshot TakeSnapshot(const Session& s) {
  SessionSnapshot snap;
  snap.position = s.position;
  for (size_t L = 0; L < s.kda_state.size(); ++L) {
    snap.floats.insert(snap.floats.end(), s.kda_state[L].begin(), s.kda_state[L].end());
    snap.floats.insert(snap.floats.end(), s.conv_ring[L].begin(), s.conv_ring[L].end());
    for (std::span<const float> cache : {s.latent_kv[L], s.kv_cache[L]})
      snap.floats.insert(snap.floats.end(), cache.begin(),
                         cache.begin() + KvUsed(s, cache, s.position));
  }
  return snap;
}

Status RestoreSnapshot(const SessionSnapshot& snap, Session& to) {
  if (snap.position > to.max_context)
    return Status::Error("the snapshot holds " + std::to_string(snap.position) +
                         " tokens; the session has room for " + std::to_string(to.max_context));
  size_t need = 0;
  for (size_t L = 0; L < to.kda_state.size(); ++L)
    need += to.kda_state[L].size() + to.conv_ring[L].size() +
            KvUsed(to, to.latent_kv[L], snap.position) + KvUsed(to, to.kv_cache[L], snap.position);
  if (need != snap.floats.size()) return Status::Error("the snapshot is of another model's session");
  const float* from = snap.floats.data();
  auto put = [&](std::span<float> dst, size_t n) {
    std::copy(from, from + n, dst.begin());
    from += n;
  };
  for (size_t L = 0; L < to.kda_state.size(); ++L) {
    put(to.kda_state[L], to.kda_state[L].size());
    put(to.conv_ring[L], to.conv_ring[L].size());
    put(to.latent_kv[L], KvUsed(to, to.latent_kv[L], snap.position));
    put(to.kv_cache[L], KvUsed(to, to.kv_cache[L], snap.position));
  }
  to.position = snap.position;
  return Status::Ok();
}

Session Model::NewSession(int max_context) const {
  Session s;
  s.max_context = max_context;
  const size_t kda = static_cast<size_t>(c_.kda_heads) * c_.kda_head_dim * c_.kda_head_dim;
  const size_t ring = static_cast<size_t>(3) * (c_.conv_kernel - 1) * c_.kda_width();
  const size_t kv = static_cast<size_t>(max_context) * (c_.kv_lora + c_.qk_rope);
  const size_t gqa_kv = static_cast<size_t>(max_context) * 2 * c_.kv_width();
  const size_t gdn = static_cast<size_t>(c_.gdn_v_heads) * c_.gdn_k_dim * c_.gdn_v_dim;
  const size_t gdn_ring = static_cast<size_t>(c_.conv_kernel - 1) * c_.gdn_conv_width();
  // Each layer's part starts on a 64-byte line.
  auto line = [](size_t floats) { return (floats + 15) / 16 * 16; };
  // What each layer kind keeps: KDA and Gated DeltaNet their recurrent
  // states and conv rings, and their spares (model.h), MLA its latent cache,
  // GQA its K/V cache.
  auto layer_floats = [&](LayerKind kind) {
    switch (kind) {
      case LayerKind::kKda:
        return 2 * (line(kda) + line(ring));
      case LayerKind::kGatedDeltaNet:
        return 2 * (line(gdn) + line(gdn_ring));
      case LayerKind::kMla:
        return line(kv);
      case LayerKind::kGqa:
        return line(gqa_kv);
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
  s.kv_cache.resize(c_.n_layers);
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
      case LayerKind::kGatedDeltaNet:
        s.kda_state[L] = take(gdn);
        s.conv_ring[L] = take(gdn_ring);
        s.kda_spare[L] = take(gdn);
        s.conv_spare[L] = take(gdn_ring);
        break;
      case LayerKind::kMla:
        s.latent_kv[L] = take(kv);
        break;
      case LayerKind::kGqa:
        s.kv_cache[L] = take(gqa_kv);
        break;
    }
  }
  return s;
}

}  // namespace waste

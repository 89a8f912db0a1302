// A session's memory, each layer's part placed by its attention kind
// (ForwardPass::NewSession), and its snapshots.

#include <algorithm>
#include <new>

#include "engine/model/forward.h"

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

Session ForwardPass::NewSession(int max_context) const {
  Session s;
  s.max_context = max_context;
  s.kda_state.resize(c_.n_layers);
  s.conv_ring.resize(c_.n_layers);
  s.latent_kv.resize(c_.n_layers);
  s.kv_cache.resize(c_.n_layers);
  s.kda_spare.resize(c_.n_layers);
  s.conv_spare.resize(c_.n_layers);
  // What each layer's attention keeps (its kind says: layer.h,
  // AttentionLayer::PlaceState), counted, then carved out of one region.
  StateCarver count;
  for (const auto& l : layers_) l->attention->PlaceState(c_, s, count);
  auto memory =
      Region::Allocate(std::max<size_t>(count.floats(), 1) * sizeof(float), /*populate=*/false);
  if (!memory.ok()) throw std::bad_alloc();
  s.memory = std::move(*memory);
  StateCarver carve(reinterpret_cast<float*>(s.memory.data()));
  for (const auto& l : layers_) l->attention->PlaceState(c_, s, carve);
  return s;
}

}  // namespace waste

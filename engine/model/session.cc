// A session's memory, each layer's part placed by its attention kind
// (ForwardPass::NewSession), and its snapshots.

#include <algorithm>
#include <new>

#include "engine/model/forward.h"

namespace waste {

uint64_t Session::state_bytes() const {
  uint64_t n = 0;
  for (const auto& v : state) n += v.size() * 4;
  for (const auto& v : ring) n += v.size() * 4;
  for (const auto& v : cache) n += v.size() * 4;
  for (const auto& v : state_spare) n += v.size() * 4;
  for (const auto& v : ring_spare) n += v.size() * 4;
  return n;
}

namespace {

// The floats of a layer's per-position cache below `position`: it holds
// max_context rows.
size_t KvUsed(const Session& s, std::span<const float> cache, int position) {
  if (cache.empty() || s.max_context == 0) return 0;
  return cache.size() / static_cast<size_t>(s.max_context) * static_cast<size_t>(position);
}

}  // namespace

SessionSnapshot TakeSnapshot(const Session& s) {
  SessionSnapshot snap;
  snap.position = s.position;
  for (size_t L = 0; L < s.state.size(); ++L) {
    snap.floats.insert(snap.floats.end(), s.state[L].begin(), s.state[L].end());
    snap.floats.insert(snap.floats.end(), s.ring[L].begin(), s.ring[L].end());
    snap.floats.insert(snap.floats.end(), s.cache[L].begin(),
                       s.cache[L].begin() + KvUsed(s, s.cache[L], s.position));
  }
  return snap;
}

Status RestoreSnapshot(const SessionSnapshot& snap, Session& to) {
  if (snap.position > to.max_context)
    return Status::Error("the snapshot holds " + std::to_string(snap.position) +
                         " tokens; the session has room for " + std::to_string(to.max_context));
  size_t need = 0;
  for (size_t L = 0; L < to.state.size(); ++L)
    need += to.state[L].size() + to.ring[L].size() + KvUsed(to, to.cache[L], snap.position);
  if (need != snap.floats.size()) return Status::Error("the snapshot is of another model's session");
  const float* from = snap.floats.data();
  auto put = [&](std::span<float> dst, size_t n) {
    std::copy(from, from + n, dst.begin());
    from += n;
  };
  for (size_t L = 0; L < to.state.size(); ++L) {
    put(to.state[L], to.state[L].size());
    put(to.ring[L], to.ring[L].size());
    put(to.cache[L], KvUsed(to, to.cache[L], snap.position));
  }
  to.position = snap.position;
  return Status::Ok();
}

Session ForwardPass::NewSession(int max_context) const {
  Session s;
  s.max_context = max_context;
  s.state.resize(c_.n_layers);
  s.ring.resize(c_.n_layers);
  s.cache.resize(c_.n_layers);
  s.state_spare.resize(c_.n_layers);
  s.ring_spare.resize(c_.n_layers);
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

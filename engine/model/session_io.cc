#include "engine/model/session_io.h"

#include <cstring>
#include <filesystem>
#include <fstream>

namespace waste {
namespace {

constexpr char kMagic[8] = {'W', 'A', 'S', 'T', 'E', 'S', 'E', 'S'};
constexpr uint32_t kVersion = 1;

uint64_t Fnv(uint64_t h, std::string_view s) {
  for (char ch : s) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h;
}

// The floats per position of layer L's cache (0 when it has none): it
// holds max_context rows.
size_t RowFloats(const Session& s, int L) {
  if (s.max_context == 0) return 0;
  return s.cache[L].size() / static_cast<size_t>(s.max_context);
}

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t layers;
  uint64_t fingerprint;
  int64_t position;
  int64_t max_context;
};

// A packed prompt state: this header, the snapshot's floats, the logits.
constexpr char kPromptMagic[8] = {'W', 'A', 'S', 'T', 'E', 'P', 'R', 'S'};
constexpr uint32_t kPromptVersion = 1;
struct PromptHeader {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t fingerprint;
  int64_t position;
  uint64_t floats;
  uint64_t logits;
};

}  // namespace

std::vector<uint8_t> PackPromptState(uint64_t fingerprint, const SessionSnapshot& snap,
                                     std::span<const float> logits) {
  PromptHeader h{};
  std::memcpy(h.magic, kPromptMagic, 8);
  h.version = kPromptVersion;
  h.fingerprint = fingerprint;
  h.position = snap.position;
  h.floats = snap.floats.size();
  h.logits = logits.size();
  std::vector<uint8_t> out(sizeof h + (h.floats + h.logits) * 4);
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, snap.floats.data(), h.floats * 4);
  std::memcpy(out.data() + sizeof h + h.floats * 4, logits.data(), h.logits * 4);
  return out;
}

Result<PromptState> UnpackPromptState(std::span<const uint8_t> bytes, uint64_t fingerprint,
                                      int tokens, int vocab) {
  PromptHeader h{};
  if (bytes.size() < sizeof h) return Status::Error("a prompt state of " + std::to_string(bytes.size()) + " bytes, less than its header");
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kPromptMagic, 8) != 0 || h.version != kPromptVersion)
    return Status::Error("not a prompt state of this build");
  if (h.fingerprint != fingerprint) return Status::Error("a prompt state of another model");
  if (h.position != tokens || h.logits != static_cast<uint64_t>(vocab))
    return Status::Error("a prompt state at position " + std::to_string(h.position) + " with " +
                         std::to_string(h.logits) + " logits, where " + std::to_string(tokens) +
                         " tokens and " + std::to_string(vocab) + " were expected");
  const uint64_t body = bytes.size() - sizeof h;
  if (h.floats > body / 4 || body != (h.floats + h.logits) * 4)
    return Status::Error("a prompt state of " + std::to_string(bytes.size()) +
                         " bytes, where its header says otherwise");
  PromptState out;
  out.state.position = static_cast<int>(h.position);
  out.state.floats.resize(h.floats);
  out.logits.resize(h.logits);
  std::memcpy(out.state.floats.data(), bytes.data() + sizeof h, h.floats * 4);
  std::memcpy(out.logits.data(), bytes.data() + sizeof h + h.floats * 4, h.logits * 4);
  return out;
}

uint64_t ModelFingerprint(const Container& ct) {
  const Manifest& man = ct.manifest();
  uint64_t h = Fnv(1469598103934665603ull, man.config_json.dump());
  for (const TrunkTensor& t : man.trunk) {
    h = Fnv(h, t.name);
    for (int64_t d : t.shape) h = Fnv(h, std::to_string(d));
  }
  return h;
}

Status SaveSession(const Container& ct, const Session& s, const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) return Status::Error(path + ": cannot write");
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.layers = static_cast<uint32_t>(ct.config().n_layers);
  h.fingerprint = ModelFingerprint(ct);
  h.position = s.position;
  h.max_context = s.max_context;
  f.write(reinterpret_cast<const char*>(&h), sizeof h);
  const ModelConfig& c = ct.config();
  for (int L = 0; L < c.n_layers; ++L) {
    f.write(reinterpret_cast<const char*>(s.state[L].data()), s.state[L].size() * 4);
    f.write(reinterpret_cast<const char*>(s.ring[L].data()), s.ring[L].size() * 4);
    const size_t used = static_cast<size_t>(s.position) * RowFloats(s, L);
    f.write(reinterpret_cast<const char*>(s.cache[L].data()), used * 4);
  }
  f.close();
  if (!f) return Status::Error(path + ": write failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::Error(path + ": rename failed");
  return Status::Ok();
}

Result<Session> LoadSession(const Model& m, const std::string& path, int max_context) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error(path + ": cannot read");
  Header h{};
  if (!f.read(reinterpret_cast<char*>(&h), sizeof h) || std::memcmp(h.magic, kMagic, 8) != 0)
    return Status::Error(path + ": not a waste session state");
  if (h.version != kVersion)
    return Status::Error(path + ": state version " + std::to_string(h.version) +
                         ", this build reads " + std::to_string(kVersion));
  if (h.fingerprint != ModelFingerprint(m.container()) ||
      h.layers != static_cast<uint32_t>(m.config().n_layers))
    return Status::Error(path + ": the state was saved from another model");
  if (h.max_context < 1 || h.max_context > (1 << 24) || h.position < 0 ||
      h.position > h.max_context)
    return Status::Error(path + ": position " + std::to_string(h.position) + " / context " +
                         std::to_string(h.max_context) + " is out of range");
  if (h.max_context > max_context)
    return Status::Error(path + ": the state holds a context of " +
                         std::to_string(h.max_context) + " tokens, more than this session's " +
                         std::to_string(max_context) + " (--ctx)");
  // The bytes the header implies, checked before anything is allocated.
  const ModelConfig& c = m.config();
  const Session probe = m.NewSession(1);
  uint64_t want = sizeof h;
  for (int L = 0; L < c.n_layers; ++L) {
    want += (probe.state[L].size() + probe.ring[L].size()) * 4;
    want += static_cast<uint64_t>(h.position) * RowFloats(probe, L) * 4;
  }
  std::error_code ec;
  const uint64_t have = std::filesystem::file_size(path, ec);
  if (ec || have != want)
    return Status::Error(path + ": " + std::to_string(have) + " bytes, where position " +
                         std::to_string(h.position) + " of this model takes " +
                         std::to_string(want));
  Session s = m.NewSession(static_cast<int>(h.max_context));
  s.position = static_cast<int>(h.position);
  for (int L = 0; L < c.n_layers; ++L) {
    const size_t used = static_cast<size_t>(s.position) * RowFloats(s, L);
    if (!f.read(reinterpret_cast<char*>(s.state[L].data()), s.state[L].size() * 4) ||
        !f.read(reinterpret_cast<char*>(s.ring[L].data()), s.ring[L].size() * 4) ||
        !f.read(reinterpret_cast<char*>(s.cache[L].data()), used * 4))
      return Status::Error(path + ": truncated at layer " + std::to_string(L));
  }
  if (f.peek() != std::char_traits<char>::eof()) return Status::Error(path + ": trailing bytes");
  return s;
}

}  // namespace waste

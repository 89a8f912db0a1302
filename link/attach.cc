#include "link/attach.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#include "engine/format/fingerprint.h"

namespace waste {
namespace {

// The shared source's line to the daemon: hints are queued for the link
// thread, the connection's state is a flag the link thread keeps.
class ClientSink final : public HintSink {
 public:
  explicit ClientSink(DaemonClient* c) : c_(c) {}
  void SendHint(int layer, std::span<const int> experts, HintKind kind) override {
    c_->SendHint(layer, experts, kind);
  }
  Status Health() const override { return c_->Poll(); }
  void SendProgress(uint64_t tokens) override { c_->SendProgress(tokens); }

 private:
  DaemonClient* c_;
};

std::string CommandLine() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (char& ch : all)
    if (ch == '\0') ch = ' ';
  while (!all.empty() && all.back() == ' ') all.pop_back();
  return all;
}

Result<shm::Mapping> MapSegment(const SegmentFd& s, bool writable, bool populate,
                                const char* what) {
  auto m = shm::Mapping::Map(s.fd, s.bytes, writable, populate);
  if (!m.ok()) return m.status().Prefixed(std::string("mapping wasted's ") + what + " segment");
  return m;
}

// How an attach that failed ended, for the caller that tries again.
struct AttachEnd {
  bool lost = false;         // the connection ended first: another daemon may come
  bool other_model = false;  // the daemon serves another container: `served`
  DaemonModel served;
};

Result<std::unique_ptr<DaemonLink>> Attach(std::unique_ptr<DaemonClient> client,
                                           const std::string& socket, const Container& ct,
                                           AttachEnd* end) {
  auto link = std::make_unique<DaemonLink>();
  link->socket = socket;
  link->client = std::move(client);
  auto att = link->client->Attach(CommandLine());
  if (!att.ok()) {
    end->lost = !link->client->connected();
    return att.status().Prefixed("wasted at " + socket);
  }
  link->attachment = std::move(*att);
  const DaemonModel& m = link->attachment.model;
  if (m.fingerprint != ManifestFingerprint(ct.manifest())) {
    end->other_model = true;
    end->served = m;
    return Status::Error("wasted at " + socket + " serves " + m.container + ", not " + ct.dir() +
                         " (use --socket for another daemon, or --local)");
  }
  const ModelConfig& c = ct.config();
  if (m.layers != static_cast<uint32_t>(c.n_layers) ||
      m.experts != static_cast<uint32_t>(c.n_experts) || m.record_bytes != ct.record_bytes())
    return Status::Error("wasted at " + socket + " describes another model shape");
  const Attachment& a = link->attachment;
  // The trunk is read every token: its page tables are filled now, so the
  // first token does not pay for them. The cache is not (gigabytes of page
  // tables for slots this client may never read; a slot's first read maps
  // it, 16 pages per fault).
  auto trunk = MapSegment(a.trunk, false, true, "trunk");
  if (!trunk.ok()) return trunk.status();
  link->trunk = std::move(*trunk);
  auto cache = MapSegment(a.cache, false, false, "cache");
  if (!cache.ok()) return cache.status();
  link->cache = std::move(*cache);
  auto table = MapSegment(a.table, false, true, "slot table");
  if (!table.ok()) return table.status();
  link->table = std::move(*table);
  if (a.pins.bytes < sizeof(shm::PinPage))
    return Status::Error("wasted at " + socket + " sent a pin page that is too small");
  auto pins = MapSegment(a.pins, true, true, "pin page");
  if (!pins.ok()) return pins.status();
  link->pins = std::move(*pins);
  auto t = shm::SlotTable::Attach(link->table.data(), link->table.size(), m.layers, m.experts,
                                  m.record_bytes);
  if (!t.ok()) return t.status().Prefixed("wasted at " + socket);
  if (uint64_t{t->slots()} * t->header().slot_stride > link->cache.size())
    return Status::Error("wasted at " + socket + ": the slot table does not fit the cache");
  link->slots = *t;

  link->sink = std::make_unique<ClientSink>(link->client.get());
  SharedCacheView view;
  view.table = *t;
  view.cache = link->cache.data();
  view.cache_bytes = link->cache.size();
  view.pins = reinterpret_cast<shm::PinPage*>(link->pins.data());
  std::vector<bool> has(c.n_layers);
  for (int L = 0; L < c.n_layers; ++L) has[L] = ct.manifest().Bank(L) != nullptr;
  link->source = std::make_unique<SharedExpertSource>(view, has, c.n_experts, link->sink.get());
  return link;
}

}  // namespace

Status DaemonLink::Health() const {
  WASTE_RETURN_IF_ERROR(client->Poll());
  if (slots.header().serving.load(std::memory_order_acquire) == 0)
    return Status::Error("wasted went away: it is stopping");
  return Status::Ok();
}

Result<std::unique_ptr<DaemonLink>> AttachDaemon(std::unique_ptr<DaemonClient> client,
                                                 const std::string& socket, const Container& ct) {
  AttachEnd end;
  return Attach(std::move(client), socket, ct, &end);
}

Result<std::unique_ptr<DaemonLink>> ReattachDaemon(const std::string& socket, const Container& ct,
                                                   double wait_seconds, const std::string& gone) {
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(wait_seconds, 0.0)));
  for (;;) {
    ConnectFailure why;
    auto client = DaemonClient::Connect(socket, &why);
    if (!client.ok() && why != ConnectFailure::kNotListening)
      return client.status().Prefixed(gone + "; attaching again");
    if (client.ok()) {
      AttachEnd end;
      auto link = Attach(std::move(*client), socket, ct, &end);
      if (link.ok() && (*link)->Health().ok()) return link;
      if (end.other_model)
        return Status::Error(gone + "; the wasted now at " + socket + " serves " +
                             end.served.container + " (fingerprint " + end.served.fingerprint +
                             "), a different model from " + ct.dir() + " (fingerprint " +
                             ManifestFingerprint(ct.manifest()) + "): not continuing");
      // A refusal is final; a daemon that went before answering, or is
      // stopping (a healthless link), makes way for the next one.
      if (!link.ok() && !end.lost) return link.status().Prefixed(gone + "; attaching again");
    }
    if (Clock::now() >= deadline) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", wait_seconds);
      return Status::Error(gone + "; no wasted served " + ct.dir() + " at " + socket +
                           " again within " + secs + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace waste

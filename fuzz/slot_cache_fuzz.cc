// Fuzz target: the daemon's cache policy (daemon/slot_cache.h) under a
// hostile client. The input is a pin page full of garbage (the daemon treats
// every word of a page as untrusted) and then a program of operations: hints
// of every kind, reads started and finished (some failed), drops, warm-ups,
// pins taken and dropped as a client would, clients coming and going, and
// more garbage written into the page at any time. After every step the
// invariants must hold: a slot pinned (within the cap) while ready is never
// changed under its pin, and the counters agree with the table.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "daemon/slot_cache.h"
#include "fuzz/input.h"

namespace {

using waste::HintKind;
using waste::ReadError;
using waste::daemon::ReadJob;
using waste::daemon::SlotCache;
using waste::fuzz::Input;
namespace shm = waste::shm;

constexpr uint32_t kLayers = 4, kExperts = 16;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const uint32_t slots = 1 + in.Byte() % 12;
  std::vector<uint64_t> mem(shm::SlotTable::BytesFor(kLayers, kExperts, slots) / 8 + 1);
  auto t = shm::SlotTable::Init(reinterpret_cast<uint8_t*>(mem.data()), mem.size() * 8, kLayers,
                                kExperts, slots, 4096, 4096);
  Check(t.ok());
  const shm::SlotTable table = *t;
  table.header().pins_per_client = 1 + in.Byte() % 8;
  SlotCache cache(table, {false, true, true, true}, 4096, waste::EvictionPolicy::kLfru,
                  1 + in.Byte() % 16);
  // Client 0 is hostile (its page is raw input); client 1 pins as TryPin does.
  auto hostile = std::make_unique<shm::PinPage>();
  auto honest = std::make_unique<shm::PinPage>();
  for (auto& w : hostile->pins) w.store(in.Word() % (slots + 3));
  shm::PinSet pins(honest.get(), table.pins_per_client());
  std::vector<std::pair<uint32_t, uint32_t>> held;  // (slot, word when pinned)
  cache.AddClient(0, hostile.get());
  cache.AddClient(1, honest.get());
  bool hostile_live = true;
  std::vector<ReadJob> running;

  while (in.n > 0) {
    const uint8_t op = in.Byte();
    switch (op % 9) {
      case 0:
      case 1: {  // a hint (ids in range: the RPC server refuses the rest)
        const uint32_t client = in.Byte() & 1;
        const int layer = 1 + in.Byte() % 3;
        std::vector<uint32_t> experts(in.Byte() % 20);
        for (auto& e : experts) e = in.Byte() % kExperts;
        cache.Hint(client, layer, experts, static_cast<HintKind>(in.Byte() % 3));
        break;
      }
      case 2: {
        for (const ReadJob& j : cache.Dispatch(1 + in.Byte() % 4)) {
          Check(j.slot < slots);
          Check(shm::StateOf(table.slot(j.slot).word.load()) == shm::SlotState::kLoading);
          running.push_back(j);
        }
        break;
      }
      case 3:
        if (!running.empty()) {
          const size_t i = in.Byte() % running.size();
          const auto err = static_cast<ReadError>(in.Byte() % 4);
          cache.Complete(running[i], err, in.Byte());
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 4: {  // the honest client pins or unpins
        if ((in.Byte() & 1) && !held.empty()) {
          pins.Remove(held.back().first);
          held.pop_back();
        } else {
          const shm::PinAttempt a =
              shm::TryPin(table, pins, 1 + in.Byte() % 3, in.Byte() % kExperts);
          if (a.kind == shm::PinAttempt::kPinned) held.push_back({a.slot, a.word});
        }
        break;
      }
      case 5:
        cache.Drop(static_cast<int8_t>(in.Byte()) % 5);
        break;
      case 6: {
        std::vector<uint32_t> keys(in.Byte() % 8);
        for (auto& k : keys) k = in.Word();  // unchecked: Warm checks its keys itself
        cache.Warm(keys);
        break;
      }
      case 7:  // garbage into the hostile page, or it goes and comes back
        if (in.Byte() & 1) {
          hostile->pins[in.Word() % shm::kPinsPerClient].store(in.Word());
        } else if (hostile_live) {
          cache.RemoveClient(0);
          hostile_live = false;
        } else {
          cache.AddClient(0, hostile.get());
          hostile_live = true;
        }
        break;
      case 8:
        (void)cache.client_counters(in.Byte() % 3);
        break;
    }
    // Invariant 3: nothing the honest client pinned changed under it.
    for (const auto& [slot, word] : held) Check(table.slot(slot).word.load() == word);
    const auto c = cache.counters();
    Check(c.ready + c.loading + c.failed <= slots);
    Check(c.loading == running.size());
    Check(c.pinned <= slots);
    Check(cache.client_counters(1).pins == held.size());
  }
  for (const ReadJob& j : running) cache.Complete(j, ReadError::kNone, 0);
  return 0;
}

// The slot table and the pin pages: how a client finds an expert record in
// the daemon's cache, and keeps it, without asking the daemon.
//
// The table segment (written by the daemon, mapped read-only by clients):
//
//   TableHeader
//   SlotEntry   slots[header.slots]            one per cache slot
//   uint32_t    index[layers * experts]        slot holding (layer, expert), or kNoSlot
//
// A slot's state word is `generation << 2 | state`; every state change bumps
// the generation, so a client that read a word and later reads the same word
// knows nothing happened in between. Only the daemon writes the table, from
// one thread, and only through the functions below that say "daemon":
//
//   empty --MarkLoading--> loading --Publish--> ready  --Retire--> empty
//                                  \--Fail----> failed --Retire--> empty
//
// A pin page (one writable page per client, its own memfd) lists the slots
// that client is reading. The daemon never evicts a slot listed in any live
// client's page, and it treats every word of a page as untrusted.
//
// Pinning, the client's side (TryPin), and retiring, the daemon's side
// (Retire), form a store-load handshake: the client stores its pin and then
// re-reads the state word; the daemon stores the new state word and then
// re-reads the pins. All four are sequentially consistent operations, so
// they fall in one total order and at least one side sees the other's store
// (no fences needed, and none used: ThreadSanitizer does not model them):
// either the client backs off or the daemon keeps the slot, and a pinned
// slot is never overwritten (invariant 3).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "base/expert_key.h"
#include "base/read_error.h"
#include "base/status.h"

namespace waste::shm {

enum class SlotState : uint32_t { kEmpty = 0, kLoading = 1, kReady = 2, kFailed = 3 };

inline SlotState StateOf(uint32_t word) {
  return static_cast<SlotState>(word & 3u);
}
inline uint32_t GenerationOf(uint32_t word) {
  return word >> 2;
}
inline uint32_t MakeWord(SlotState s, uint32_t generation) {
  return generation << 2 | static_cast<uint32_t>(s);
}

constexpr uint32_t kNoSlot = 0xffffffffu;
constexpr uint32_t kTableMagic = 0x42545357;  // "WSTB"
constexpr uint32_t kTableVersion = 1;

struct alignas(64) TableHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t layers;   // index rows (every layer, MoE or not)
  uint32_t experts;  // index columns
  uint32_t slots;
  // How many entries of a pin page the daemon honours: the first ones. A
  // client never pins more at once; a pin written beyond them protects
  // nothing (the per-client cap on pins, so that no client can hold the
  // whole cache). Read through SlotTable::pins_per_client().
  uint32_t pins_per_client;
  uint64_t record_bytes;  // one expert record
  uint64_t slot_stride;   // slot s starts at cache + s * slot_stride (4 KiB multiple)
  // Bumped and woken whenever an index entry or a slot's state changes, so a
  // client waiting for a record that has no slot yet can sleep on it.
  std::atomic<uint32_t> epoch;
  // 1 while the daemon serves; 0 once it is stopping (then epoch is woken).
  std::atomic<uint32_t> serving;
};

struct alignas(16) SlotEntry {
  std::atomic<uint32_t> word;    // MakeWord(state, generation); futex word
  std::atomic<uint32_t> key;     // ExpertKey of the record, kNoKey when empty
  std::atomic<uint32_t> error;   // ReadError when failed
  std::atomic<uint32_t> detail;  // errno for ReadError::kIo
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock free");
static_assert(sizeof(SlotEntry) == 16);

// A view of a table segment. Copyable; does not own the memory.
class SlotTable {
 public:
  static uint64_t BytesFor(uint32_t layers, uint32_t experts, uint32_t slots);

  // The daemon: lays out an empty table in `mem` (zeroed or not).
  static Result<SlotTable> Init(uint8_t* mem, uint64_t size, uint32_t layers, uint32_t experts,
                                uint32_t slots, uint64_t record_bytes, uint64_t slot_stride);
  // A client: checks the header of a mapped table against its size and the
  // model it expects, so that no later index can leave the mapping.
  static Result<SlotTable> Attach(uint8_t* mem, uint64_t size, uint32_t layers, uint32_t experts,
                                  uint64_t record_bytes);

  SlotTable() = default;
  TableHeader& header() const { return *header_; }
  uint32_t slots() const { return header_->slots; }
  uint32_t pins_per_client() const;  // 1..kPinsPerClient
  SlotEntry& slot(uint32_t s) const { return slots_[s]; }
  // Callers check layer < layers and expert < experts.
  std::atomic<uint32_t>& index(int layer, int expert) const {
    return index_[static_cast<size_t>(layer) * header_->experts + static_cast<size_t>(expert)];
  }

  // Bumps the epoch and wakes everyone sleeping on it (daemon).
  void Announce() const;

 private:
  SlotTable(uint8_t* mem);
  TableHeader* header_ = nullptr;
  SlotEntry* slots_ = nullptr;
  std::atomic<uint32_t>* index_ = nullptr;
};

constexpr uint32_t kPinsPerClient = 1022;

// One client's pin page: a 4 KiB page the client writes and the daemon reads
// (its last 8 bytes are unused).
struct alignas(4096) PinPage {
  std::atomic<uint32_t> pins[kPinsPerClient];  // slot + 1 per held pin, 0 for a free entry
};
static_assert(sizeof(PinPage) == 4096);

// The client's side of a pin page. Not thread safe: one per client, whose
// owner serializes the calls (SharedExpertSource holds its mutex).
class PinSet {
 public:
  // Uses the first `capacity` entries of the page (the table's
  // pins_per_client) and clears the whole page.
  explicit PinSet(PinPage* page, uint32_t capacity = kPinsPerClient);
  // Records a pin on `slot`; false when every usable entry is taken.
  bool Add(uint32_t slot);
  // Drops one pin on `slot` (the most recent one).
  void Remove(uint32_t slot);
  uint32_t held() const { return held_; }

 private:
  PinPage* page_;
  uint32_t capacity_;
  std::vector<uint32_t> free_;  // entry indices not in use
  uint32_t held_ = 0;
};

// Outcome of TryPin.
struct PinAttempt {
  enum Kind {
    kPinned,   // ready and pinned: `slot` may be read until Unpin
    kLoading,  // a read is under way: wait on the slot's word != `word`
    kAbsent,   // no slot holds it: ask for it and wait on the epoch
    kFailed,   // the last read failed: `error`, `detail`
    kNoRoom,   // the pin page is full
  } kind;
  uint32_t slot = kNoSlot;
  uint32_t word = 0;
  ReadError error = ReadError::kNone;
  uint32_t detail = 0;
};

// Finds (layer, expert) and pins it if ready (client). Retries internally when
// the slot changes under it, so kAbsent and kLoading are real states.
PinAttempt TryPin(const SlotTable& t, PinSet& pins, int layer, int expert);

// The daemon's side: which slots any of `pages` pins in its first `per_page`
// entries. Out-of-range words in a page are ignored; `pinned` is resized to
// the slot count and counts pins.
void CollectPins(std::span<const PinPage* const> pages, uint32_t per_page, uint32_t slots,
                 std::vector<uint16_t>* pinned);
// Whether any page pins `slot` in its first `per_page` entries.
bool AnyPins(std::span<const PinPage* const> pages, uint32_t per_page, uint32_t slot);

// What the daemon sees of a slot (daemon). Relaxed loads: the daemon is the
// only writer, so it reads its own latest stores.
struct SlotPeek {
  uint32_t slot = kNoSlot;
  SlotState state = SlotState::kEmpty;
  uint32_t key = kNoKey;  // as stored: kNoKey when empty
};
SlotPeek Peek(const SlotTable& t, uint32_t slot);
// The slot the index gives for (layer, expert), ids in range; slot kNoSlot
// (state kEmpty) when none.
SlotPeek PeekRecord(const SlotTable& t, int layer, int expert);

// Assigns an empty slot to `key` and marks it loading (daemon): key, error
// and detail (relaxed), then the state word (generation + 1) and the index
// entry, both with release, so that a client that finds the slot through the
// index sees its key. Wakes nobody and does not announce: the caller calls
// SlotTable::Announce once after a batch, which tells the clients waiting
// for an absent record that it has a slot now.
void MarkLoading(const SlotTable& t, uint32_t slot, uint32_t key);
// The read into a loading slot succeeded (daemon): marks it ready
// (generation + 1, release: the record's bytes, written before, are seen by
// whoever sees the word), wakes every waiter on the word and announces.
void Publish(const SlotTable& t, uint32_t slot);
// The read into a loading slot failed (daemon): stores `error` and `detail`
// (relaxed), marks it failed (generation + 1, release, so the two are seen
// with it), wakes every waiter on the word and announces.
void Fail(const SlotTable& t, uint32_t slot, ReadError error, uint32_t detail);
// Takes a ready or failed slot out of service so it can be reused (daemon):
// clears its index entry and marks it empty (generation + 1), then checks the
// pin pages (the first pins_per_client entries of each); if a pin raced in,
// puts everything back (the old word: its generation included) and returns
// false. On success clears the key. All the stores and the pin loads are
// sequentially consistent (the handshake above). Does not announce: the
// caller does, once after a batch.
bool Retire(const SlotTable& t, uint32_t slot, std::span<const PinPage* const> pages);
// The daemon is stopping (daemon): clears `serving` (seq_cst), announces and
// wakes every waiter on every slot's word, so that no client sleeps on.
void StopServing(const SlotTable& t);

// futex(2) on a word in shared memory, across processes. Wait returns when
// the word is no longer `expected`, when woken, or after `timeout_ms`.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void FutexWakeAll(std::atomic<uint32_t>* word);

}  // namespace waste::shm

#include "shm/table.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <string>

namespace waste::shm {
namespace {

uint64_t Align(uint64_t n, uint64_t to) {
  return (n + to - 1) / to * to;
}

uint64_t SlotsOffset() {
  return Align(sizeof(TableHeader), 64);
}

uint64_t IndexOffset(uint32_t slots) {
  return Align(SlotsOffset() + uint64_t{slots} * sizeof(SlotEntry), 64);
}

}  // namespace

uint64_t SlotTable::BytesFor(uint32_t layers, uint32_t experts, uint32_t slots) {
  return Align(IndexOffset(slots) + uint64_t{layers} * experts * sizeof(uint32_t), 4096);
}

SlotTable::SlotTable(uint8_t* mem)
    : header_(reinterpret_cast<TableHeader*>(mem)),
      slots_(reinterpret_cast<SlotEntry*>(mem + SlotsOffset())),
      index_(reinterpret_cast<std::atomic<uint32_t>*>(mem + IndexOffset(header_->slots))) {}

Result<SlotTable> SlotTable::Init(uint8_t* mem, uint64_t size, uint32_t layers, uint32_t experts,
                                  uint32_t slots, uint64_t record_bytes, uint64_t slot_stride) {
  if (layers == 0 || layers > 0xffff || experts == 0 || experts > 0xffff || slots == 0)
    return Status::Error("slot table: bad dimensions");
  if (size < BytesFor(layers, experts, slots)) return Status::Error("slot table: segment too small");
  auto* h = new (mem) TableHeader{};
  h->magic = kTableMagic;
  h->version = kTableVersion;
  h->layers = layers;
  h->experts = experts;
  h->slots = slots;
  h->pins_per_client = kPinsPerClient;
  h->record_bytes = record_bytes;
  h->slot_stride = slot_stride;
  h->epoch.store(0);
  h->serving.store(1);
  SlotTable t(mem);
  for (uint32_t s = 0; s < slots; ++s) {
    SlotEntry* e = new (&t.slots_[s]) SlotEntry{};
    e->word.store(MakeWord(SlotState::kEmpty, 0));
    e->key.store(kNoKey);
  }
  for (uint64_t i = 0; i < uint64_t{layers} * experts; ++i)
    new (&t.index_[i]) std::atomic<uint32_t>(kNoSlot);
  return t;
}

Result<SlotTable> SlotTable::Attach(uint8_t* mem, uint64_t size, uint32_t layers, uint32_t experts,
                                    uint64_t record_bytes) {
  if (size < sizeof(TableHeader)) return Status::Error("slot table: segment too small");
  const auto* h = reinterpret_cast<const TableHeader*>(mem);
  if (h->magic != kTableMagic || h->version != kTableVersion)
    return Status::Error("slot table: not a version " + std::to_string(kTableVersion) + " table");
  if (h->layers != layers || h->experts != experts || h->record_bytes != record_bytes)
    return Status::Error("slot table: describes another model");
  if (h->slots == 0 || size < BytesFor(h->layers, h->experts, h->slots))
    return Status::Error("slot table: header does not fit its segment");
  if (h->slot_stride < record_bytes || h->slot_stride % 4096 != 0)
    return Status::Error("slot table: bad slot stride");
  return SlotTable(mem);
}

uint32_t SlotTable::pins_per_client() const {
  const uint32_t n = header_->pins_per_client;
  return n == 0 || n > kPinsPerClient ? kPinsPerClient : n;
}

void SlotTable::Announce() const {
  header_->epoch.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&header_->epoch);
}

PinSet::PinSet(PinPage* page, uint32_t capacity)
    : page_(page), capacity_(capacity == 0 || capacity > kPinsPerClient ? kPinsPerClient : capacity) {
  for (uint32_t i = 0; i < kPinsPerClient; ++i) page_->pins[i].store(0, std::memory_order_relaxed);
  free_.reserve(capacity_);
  for (uint32_t i = capacity_; i-- > 0;) free_.push_back(i);
}

bool PinSet::Add(uint32_t slot) {
  if (free_.empty()) return false;
  const uint32_t i = free_.back();
  free_.pop_back();
  page_->pins[i].store(slot + 1, std::memory_order_seq_cst);
  ++held_;
  return true;
}

void PinSet::Remove(uint32_t slot) {
  // A linear scan of one page: a forward pass holds a pin or two at a time.
  for (uint32_t i = 0; i < capacity_; ++i) {
    if (page_->pins[i].load(std::memory_order_relaxed) == slot + 1) {
      page_->pins[i].store(0, std::memory_order_release);
      free_.push_back(i);
      --held_;
      return;
    }
  }
}

PinAttempt TryPin(const SlotTable& t, PinSet& pins, int layer, int expert) {
  const uint32_t key = ExpertKey(layer, expert);
  for (int attempt = 0; attempt < 64; ++attempt) {
    const uint32_t s = t.index(layer, expert).load(std::memory_order_acquire);
    if (s == kNoSlot || s >= t.slots()) return {PinAttempt::kAbsent};
    SlotEntry& e = t.slot(s);
    const uint32_t w = e.word.load(std::memory_order_acquire);
    if (e.key.load(std::memory_order_acquire) != key) continue;  // reassigned under us
    switch (StateOf(w)) {
      case SlotState::kEmpty:
        continue;  // being retired or assigned right now
      case SlotState::kLoading:
        return {PinAttempt::kLoading, s, w};
      case SlotState::kFailed: {
        PinAttempt a{PinAttempt::kFailed, s, w};
        a.error = static_cast<ReadError>(e.error.load(std::memory_order_acquire));
        a.detail = e.detail.load(std::memory_order_acquire);
        if (e.word.load(std::memory_order_acquire) != w) continue;
        return a;
      }
      case SlotState::kReady:
        if (!pins.Add(s)) return {PinAttempt::kNoRoom, s, w};
        // The pin's store and this load are both seq_cst (shm/table.h).
        if (e.word.load(std::memory_order_seq_cst) == w &&
            e.key.load(std::memory_order_acquire) == key)
          return {PinAttempt::kPinned, s, w};
        pins.Remove(s);  // retired between our reads: look again
        continue;
    }
  }
  return {PinAttempt::kAbsent};
}

void CollectPins(std::span<const PinPage* const> pages, uint32_t per_page, uint32_t slots,
                 std::vector<uint16_t>* pinned) {
  pinned->assign(slots, 0);
  per_page = std::min(per_page, kPinsPerClient);
  for (const PinPage* p : pages)
    for (uint32_t i = 0; i < per_page; ++i) {
      const uint32_t v = p->pins[i].load(std::memory_order_acquire);
      if (v != 0 && v <= slots && (*pinned)[v - 1] < 0xffff) ++(*pinned)[v - 1];
    }
}

bool AnyPins(std::span<const PinPage* const> pages, uint32_t per_page, uint32_t slot) {
  per_page = std::min(per_page, kPinsPerClient);
  for (const PinPage* p : pages)
    for (uint32_t i = 0; i < per_page; ++i)
      if (p->pins[i].load(std::memory_order_seq_cst) == slot + 1) return true;
  return false;
}

SlotPeek Peek(const SlotTable& t, uint32_t slot) {
  const SlotEntry& e = t.slot(slot);
  return {slot, StateOf(e.word.load(std::memory_order_relaxed)),
          e.key.load(std::memory_order_relaxed)};
}

SlotPeek PeekRecord(const SlotTable& t, int layer, int expert) {
  const uint32_t s = t.index(layer, expert).load(std::memory_order_relaxed);
  if (s == kNoSlot) return {};
  return Peek(t, s);
}

void MarkLoading(const SlotTable& t, uint32_t slot, uint32_t key) {
  SlotEntry& e = t.slot(slot);
  const uint32_t gen = GenerationOf(e.word.load(std::memory_order_relaxed));
  e.key.store(key, std::memory_order_relaxed);
  e.error.store(0, std::memory_order_relaxed);
  e.detail.store(0, std::memory_order_relaxed);
  e.word.store(MakeWord(SlotState::kLoading, gen + 1), std::memory_order_release);
  t.index(KeyLayer(key), KeyExpert(key)).store(slot, std::memory_order_release);
}

void Publish(const SlotTable& t, uint32_t slot) {
  SlotEntry& e = t.slot(slot);
  const uint32_t gen = GenerationOf(e.word.load(std::memory_order_relaxed));
  e.word.store(MakeWord(SlotState::kReady, gen + 1), std::memory_order_release);
  FutexWakeAll(&e.word);
  t.Announce();
}

void Fail(const SlotTable& t, uint32_t slot, ReadError error, uint32_t detail) {
  SlotEntry& e = t.slot(slot);
  const uint32_t gen = GenerationOf(e.word.load(std::memory_order_relaxed));
  e.error.store(static_cast<uint32_t>(error), std::memory_order_relaxed);
  e.detail.store(detail, std::memory_order_relaxed);
  e.word.store(MakeWord(SlotState::kFailed, gen + 1), std::memory_order_release);
  FutexWakeAll(&e.word);
  t.Announce();
}

void StopServing(const SlotTable& t) {
  t.header().serving.store(0, std::memory_order_seq_cst);
  t.Announce();
  for (uint32_t s = 0; s < t.slots(); ++s) FutexWakeAll(&t.slot(s).word);
}

bool Retire(const SlotTable& t, uint32_t slot, std::span<const PinPage* const> pages) {
  SlotEntry& e = t.slot(slot);
  const uint32_t w = e.word.load(std::memory_order_relaxed);
  const uint32_t key = e.key.load(std::memory_order_relaxed);
  std::atomic<uint32_t>* entry = nullptr;
  if (key != kNoKey && static_cast<uint32_t>(KeyLayer(key)) < t.header().layers &&
      static_cast<uint32_t>(KeyExpert(key)) < t.header().experts)
    entry = &t.index(KeyLayer(key), KeyExpert(key));
  e.word.store(MakeWord(SlotState::kEmpty, GenerationOf(w) + 1), std::memory_order_seq_cst);
  // Only an entry that pointed here is cleared, and only that one is put back:
  // the index may already send the key to another slot (a retried read).
  if (entry && entry->load(std::memory_order_relaxed) != slot) entry = nullptr;
  if (entry) entry->store(kNoSlot, std::memory_order_seq_cst);
  // The stores above and AnyPins' loads are seq_cst (shm/table.h).
  if (AnyPins(pages, t.pins_per_client(), slot)) {
    // A client pinned it before seeing the change: the bytes are untouched,
    // so the old word (same generation) is still true.
    if (entry) entry->store(slot, std::memory_order_seq_cst);
    e.word.store(w, std::memory_order_seq_cst);
    return false;
  }
  e.key.store(kNoKey, std::memory_order_release);
  return true;
}

void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  // Not FUTEX_PRIVATE: the word is in memory shared with another process.
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
          0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace waste::shm

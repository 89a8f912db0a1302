#include "base/eviction.h"

#include <algorithm>

namespace waste {

Eviction::Eviction(uint32_t slots, uint32_t records, EvictionPolicy policy)
    : policy_(policy), meta_(slots), uses_(records, 0) {}

uint64_t Eviction::fade_slots() const {
  return std::max<uint64_t>(meta_.size(), uses_.size() / kFadeFloor);
}

uint64_t Eviction::uses(uint32_t slot) const {
  const uint32_t r = meta_[slot].record;
  return r == kNoRecord ? 0 : uses_[r];
}

void Eviction::Touch(uint32_t slot) {
  Meta& m = meta_[slot];
  if (m.record != kNoRecord) uses_[m.record] += 1;
  m.last_use = ++clock_;
}

void Eviction::CountUse() {
  if (++counted_ % (kFadeEvery * fade_slots()) == 0)
    for (uint64_t& u : uses_) u /= 2;
}

void Eviction::Admit(uint32_t slot, uint32_t record, uint64_t uses) {
  meta_[slot] = Meta{record, ++clock_};
  uses_[record] += uses;
}

void Eviction::Forget(uint32_t slot) {
  meta_[slot] = Meta{};
}

}  // namespace waste

#include "base/eviction.h"

namespace waste {

Eviction::Eviction(uint32_t slots, EvictionPolicy policy) : policy_(policy), meta_(slots) {}

void Eviction::Touch(uint32_t slot) {
  Meta& m = meta_[slot];
  m.uses += 1;
  m.last_use = ++clock_;
}

void Eviction::CountUse() {
  if (++counted_ % (kFadeEvery * meta_.size()) == 0)
    for (Meta& m : meta_) m.uses /= 2;
}

void Eviction::Admit(uint32_t slot, uint64_t uses) {
  meta_[slot] = Meta{uses, ++clock_};
}

void Eviction::Forget(uint32_t slot) {
  meta_[slot] = Meta{};
}

}  // namespace waste

#include "engine/memory/region.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace waste {

Result<Region> Region::Allocate(size_t bytes, bool populate) {
  Region r;
  if (bytes == 0) return r;
  constexpr size_t kHuge = 2u << 20;
  r.mapped_ = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = mmap(nullptr, r.mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return Status::Error("cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  r.data_ = static_cast<uint8_t*>(p);
  r.size_ = bytes;
  r.huge_ = madvise(p, r.mapped_, MADV_HUGEPAGE) == 0;
  if (!populate) return r;
  // Populate now (MADV_POPULATE_WRITE where the kernel has it, else touch).
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, r.mapped_, MADV_POPULATE_WRITE) != 0)
#endif
    for (size_t off = 0; off < r.mapped_; off += 4096) r.data_[off] = 0;
  return r;
}

Region::Region(Region&& o) noexcept { *this = std::move(o); }

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, mapped_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
    huge_ = o.huge_;
  }
  return *this;
}

Region::~Region() {
  if (data_) munmap(data_, mapped_);
}

}  // namespace waste

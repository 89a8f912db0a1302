// Large private memory (the trunk, the expert cache) from mmap, on
// transparent huge pages where the system allows them, and touched once up
// front: on this kind of virtual machine a first touch of a 4 KiB page runs
// at a fraction of memory speed (docs/log/2026-11-30-issues-6-to-9.md,
// "first-token page faults"), so it is paid at load, not in the middle of
// the first tokens.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace waste {

class Region {
 public:
  // `bytes` of zeroed memory, page aligned. `populate`: fault every page in
  // now (for memory the hot path reads at once, like the trunk); otherwise
  // each page is faulted in when first touched, a huge page at a time where
  // transparent huge pages are allowed (for state that fills as it is used).
  static Result<Region> Allocate(size_t bytes, bool populate = true);

  Region() = default;
  Region(Region&& o) noexcept;
  Region& operator=(Region&& o) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool huge_pages() const { return huge_; }  // madvise(MADV_HUGEPAGE) accepted

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
  bool huge_ = false;
};

}  // namespace waste

// Shared-memory segments: a memfd of a given size, on huge pages when the
// system has them, sealable against writes, mappable read-only by another
// process that receives the descriptor. The daemon's trunk and cache
// segments are built on this; clients map what the daemon passes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace waste::shm {

enum class PageKind { kHugetlb, kTransparentHuge, kSmall };
const char* PageKindName(PageKind k);

// An owned memfd. Move-only; closes its descriptor.
class Segment {
 public:
  // Creates a segment of `bytes` (rounded up to the page size used).
  // `want_huge`: a hugetlb memfd when the reserved pool can back it, else
  // transparent huge pages (faulted in where shmem_enabled allows them,
  // otherwise made at once with MADV_COLLAPSE, Linux 6.1+, for every whole
  // 2 MiB), else 4 KiB pages; page_kind() says which one the segment got, and
  // why_small_pages() why it got no huge ones.
  static Result<Segment> Create(const std::string& name, size_t bytes, bool want_huge);
  // The size Create(bytes, want_huge) may round up to, at most: whole huge
  // pages where a pool or shmem_enabled could give them, else whole 4 KiB
  // pages (a collapsed segment keeps its tail on 4 KiB pages).
  static size_t SizeFor(size_t bytes, bool want_huge);

  Segment() = default;  // no descriptor
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  int fd() const { return fd_; }
  size_t size() const { return size_; }
  PageKind page_kind() const { return kind_; }
  // Empty unless huge pages were asked for and not had: then the reason.
  const std::string& why_small_pages() const { return why_small_; }

  // Forbids every later write, resize or new writable mapping of the memfd
  // (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL). Writable
  // mappings must be unmapped first. hugetlb memfds cannot be sealed.
  Status Seal();

  // Forbids resizing (F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) but not
  // writing: for a page another process writes while this one maps it, so
  // that the writer cannot truncate it under the reader.
  Status SealSize();

  // A new descriptor for the same memory that only allows reading: a
  // process given it cannot map the segment writable or write to it, even
  // while the owner keeps writable mappings. The caller closes it.
  Result<int> ReadOnlyFd() const;

 private:
  Segment(int fd, size_t size, PageKind kind) : fd_(fd), size_(size), kind_(kind) {}
  // A sealable memfd of exactly `size` bytes, as kSmall.
  static Result<Segment> NewMemfd(const std::string& name, size_t size);
  int fd_ = -1;
  size_t size_ = 0;
  PageKind kind_ = PageKind::kSmall;
  std::string why_small_;
};

// A mapping of a segment's descriptor; unmapped on destruction.
class Mapping {
 public:
  // Maps `bytes` of `fd`; `writable` for the owner, read-only otherwise.
  // `populate` pre-faults the pages so the first use does not pay for them.
  static Result<Mapping> Map(int fd, size_t bytes, bool writable, bool populate);

  Mapping() = default;  // nothing mapped
  Mapping(Mapping&& o) noexcept;
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  uint8_t* data() const { return static_cast<uint8_t*>(addr_); }
  size_t size() const { return size_; }

 private:
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace waste::shm

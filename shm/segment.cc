#include "shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>

namespace waste::shm {
namespace {

constexpr size_t kHugePage = 2u << 20;

// Whether shared memory may get transparent huge pages: the bracketed word
// of shmem_enabled; madvise(MADV_HUGEPAGE) is enough under "advise".
bool ShmemThpAllowed() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* on : {"[always]", "[within_size]", "[advise]", "[force]"})
    if (all.find(on) != std::string::npos) return true;
  return false;
}

std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

size_t RoundUp(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Whether the hugetlb pool has any pages reserved at all.
bool HugetlbPoolReserved() {
  std::ifstream f("/proc/sys/vm/nr_hugepages");
  long n = 0;
  return (f >> n) && n > 0;
}

// mmap at a 2 MiB boundary, so that every whole huge page of the file can be
// mapped by one page-table entry (the kernel aligns shared memory itself only
// where shmem_enabled lets faults allocate huge pages).
void* MapAligned(int fd, size_t bytes, int prot) {
  if (bytes < kHugePage) return mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  void* area = mmap(nullptr, bytes + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return MAP_FAILED;
  const uintptr_t start = reinterpret_cast<uintptr_t>(area);
  const uintptr_t aligned = RoundUp(start, kHugePage);
  void* p = mmap(reinterpret_cast<void*>(aligned), bytes, prot, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    munmap(area, bytes + kHugePage);
    errno = err;
    return MAP_FAILED;
  }
  if (aligned > start) munmap(area, aligned - start);  // the slack on either side
  const uintptr_t end = aligned + bytes, area_end = start + bytes + kHugePage;
  if (area_end > end) munmap(reinterpret_cast<void*>(end), area_end - end);
  return p;
}

// Runs f(begin, end) over [0, bytes), split in two on a 2 MiB boundary with a
// second thread when the range is large: filling page tables or zeroing huge
// pages for gigabytes goes about twice as fast on two cores. Returns the
// first nonzero result.
template <typename F>
int InTwoHalves(size_t bytes, F f) {
  constexpr size_t kSplitAbove = size_t{64} << 20;
  if (bytes < kSplitAbove || std::thread::hardware_concurrency() < 2) return f(size_t{0}, bytes);
  const size_t half = bytes / 2 / kHugePage * kHugePage;
  int second = 0;
  std::thread helper([&] { second = f(half, bytes); });
  const int first = f(size_t{0}, half);
  helper.join();
  return first != 0 ? first : second;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack the name
#endif

// Makes every 2 MiB of the first `size` bytes (a multiple of 2 MiB) of a
// fresh memfd one transparent huge page with MADV_COLLAPSE (Linux 6.1+). Unlike a fault,
// a collapse does not depend on shmem_enabled being "advise" or more (only
// "deny" refuses it), so huge pages come without an administrator. A range
// with no page at all cannot be collapsed: one byte of each 2 MiB is written
// first, and the collapse zero-fills the rest. Returns 0 or an errno.
int CollapseIntoHugePages(int fd, size_t size) {
  void* p = MapAligned(fd, size, PROT_READ | PROT_WRITE);
  if (p == MAP_FAILED) return errno;
  auto* b = static_cast<uint8_t*>(p);
  const int err = InTwoHalves(size, [b](size_t begin, size_t end) {
    for (size_t off = begin; off < end; off += kHugePage) b[off] = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {  // EAGAIN is transient: once more
      if (madvise(b + begin, end - begin, MADV_COLLAPSE) == 0) return 0;
      if (errno != EAGAIN) break;
    }
    return errno;
  });
  munmap(p, size);
  return err;
}

}  // namespace

size_t Segment::SizeFor(size_t bytes, bool want_huge) {
  // A collapse needs no rounding: it makes huge pages of the whole 2 MiB
  // blocks and leaves the tail on small ones.
  const bool huge = want_huge && (HugetlbPoolReserved() || ShmemThpAllowed());
  return RoundUp(bytes, huge ? kHugePage : 4096);
}

const char* PageKindName(PageKind k) {
  switch (k) {
    case PageKind::kHugetlb:
      return "hugetlb pages";
    case PageKind::kTransparentHuge:
      return "transparent huge pages";
    case PageKind::kSmall:
      return "4 KiB pages";
  }
  return "?";
}

Result<Segment> Segment::Create(const std::string& name, size_t bytes, bool want_huge) {
  if (bytes == 0) return Status::Error(name + ": a segment cannot be empty");
  if (want_huge) {
    const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_HUGETLB);
    if (fd >= 0) {
      // ftruncate succeeds even with an empty pool; a shared mapping reserves
      // the pages, so a trial mapping says whether the pool can back it.
      const size_t size = RoundUp(bytes, kHugePage);
      if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
        void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          munmap(p, size);
          return Segment(fd, size, PageKind::kHugetlb);
        }
      }
      close(fd);  // no pool reserved, or too small: fall through
    }
  }
  // Shared memory that faults in huge pages where shmem_enabled allows it,
  // rounded up to whole ones (a fault past the last would allocate 2 MiB
  // beyond the end); else whole small pages, with the whole 2 MiB blocks
  // collapsed into huge pages now and the tail left small.
  const bool thp_faults = want_huge && ShmemThpAllowed();
  auto seg = NewMemfd(name, RoundUp(bytes, thp_faults ? kHugePage : 4096));
  if (!seg.ok() || !want_huge) return seg;
  if (thp_faults) {
    seg->kind_ = PageKind::kTransparentHuge;
    return seg;
  }
  const size_t whole = seg->size() / kHugePage * kHugePage;
  if (whole == 0) {
    seg->why_small_ = "smaller than one 2 MiB page";
    return seg;
  }
  const int err = CollapseIntoHugePages(seg->fd(), whole);
  if (err == 0) {
    seg->kind_ = PageKind::kTransparentHuge;
    return seg;
  }
  // A fresh memfd, so that what the collapse made before it failed goes too
  // and the segment is what page_kind() says.
  auto small = NewMemfd(name, seg->size());
  if (small.ok())
    small->why_small_ =
        std::string("no hugetlb pool, shmem_enabled is never, and MADV_COLLAPSE failed: ") +
        std::strerror(err) +
        (err == EINVAL ? " (a kernel before 6.1, or shmem_enabled is deny)" : "");
  return small;
}

Result<Segment> Segment::NewMemfd(const std::string& name, size_t size) {
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::Error(Errno("memfd_create " + name));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const Status st = Status::Error(Errno("ftruncate " + name));
    close(fd);
    return st;
  }
  return Segment(fd, size, PageKind::kSmall);
}

Segment::Segment(Segment&& o) noexcept {
  *this = std::move(o);
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
    kind_ = o.kind_;
    why_small_ = std::move(o.why_small_);
  }
  return *this;
}

Segment::~Segment() {
  if (fd_ >= 0) close(fd_);
}

Status Segment::Seal() {
  if (kind_ == PageKind::kHugetlb) return Status::Error("hugetlb memfds cannot be sealed");
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return Status::Error(Errno("sealing segment"));
  return Status::Ok();
}

Status Segment::SealSize() {
  if (kind_ == PageKind::kHugetlb) return Status::Error("hugetlb memfds cannot be sealed");
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return Status::Error(Errno("sealing segment size"));
  return Status::Ok();
}

Result<int> Segment::ReadOnlyFd() const {
  // Reopening through /proc gives a new open file description with its own
  // access mode; dup() would share this one's read-write mode.
  const std::string path = "/proc/self/fd/" + std::to_string(fd_);
  const int ro = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) return Status::Error(Errno("reopening segment read-only"));
  return ro;
}

Result<Mapping> Mapping::Map(int fd, size_t bytes, bool writable, bool populate) {
  const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  // Aligned, so that each whole huge page of the segment is one page-table
  // entry; huge pages advised before populating, for segments that fault
  // them in (shmem_enabled "advise").
  void* p = MapAligned(fd, bytes, prot);
  if (p == MAP_FAILED) return Status::Error(Errno("mmap"));
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only; ignored where THP is off
  if (populate) {
    int err = EINVAL;
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
    const int advice = writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    // A large mapping on 4 KiB pages is a quarter of a million page-table
    // entries per GiB; two threads fill them in about 0.10 s instead of
    // 0.13-0.22 (1 GiB, this VM).
    err = InTwoHalves(bytes, [p, advice](size_t begin, size_t end) {
      return madvise(static_cast<uint8_t*>(p) + begin, end - begin, advice) == 0 ? 0 : errno;
    });
#endif
    if (err == EINVAL) {  // a kernel before 5.14: touch every page
      volatile const uint8_t* b = static_cast<const uint8_t*>(p);
      for (size_t off = 0; off < bytes; off += 4096) (void)b[off];
    } else if (err != 0) {  // e.g. a hugetlb pool that cannot back it
      munmap(p, bytes);
      errno = err;
      return Status::Error(Errno("populating a mapping of " + std::to_string(bytes) + " bytes"));
    }
  }
  return Mapping(p, bytes);
}

Mapping::Mapping(Mapping&& o) noexcept {
  *this = std::move(o);
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (addr_) munmap(addr_, size_);
    addr_ = std::exchange(o.addr_, nullptr);
    size_ = o.size_;
  }
  return *this;
}

Mapping::~Mapping() {
  if (addr_) munmap(addr_, size_);
}

}  // namespace waste::shm

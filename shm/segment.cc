#include "shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
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

}  // namespace

size_t Segment::SizeFor(size_t bytes, bool want_huge) {
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
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::Error(Errno("memfd_create " + name));
  // Whole huge pages only when they can be had: otherwise a small segment
  // would take 2 MiB of the budget for nothing.
  const bool thp = want_huge && ShmemThpAllowed();
  const size_t size = RoundUp(bytes, thp ? kHugePage : 4096);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const Status st = Status::Error(Errno("ftruncate " + name));
    close(fd);
    return st;
  }
  return Segment(fd, size, thp ? PageKind::kTransparentHuge : PageKind::kSmall);
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
  // Advise huge pages before populating: a huge page of shared memory is
  // mapped whole (one entry for 2 MiB) only where the mapping asked for
  // them when it was faulted in.
  void* p = mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Error(Errno("mmap"));
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only; ignored where THP is off
  if (populate) {
    int err = EINVAL;
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
    const int advice = writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    const auto populate_range = [&](size_t begin, size_t end) {
      return madvise(static_cast<uint8_t*>(p) + begin, end - begin, advice) == 0 ? 0 : errno;
    };
    // A large mapping on 4 KiB pages is a quarter of a million page-table
    // entries per GiB; two threads fill them in about 0.10 s instead of
    // 0.13-0.22 (1 GiB, this VM), the halves split on a 2 MiB boundary.
    constexpr size_t kSplitAbove = size_t{64} << 20, kHuge = size_t{2} << 20;
    if (bytes >= kSplitAbove && std::thread::hardware_concurrency() >= 2) {
      const size_t half = bytes / 2 / kHuge * kHuge;
      int second = 0;
      std::thread helper([&] { second = populate_range(half, bytes); });
      err = populate_range(0, half);
      helper.join();
      if (err == 0) err = second;
    } else {
      err = populate_range(0, bytes);
    }
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

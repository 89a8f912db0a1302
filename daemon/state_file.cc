#include "daemon/state_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/format/encoding.h"  // Crc32

namespace waste::daemon {
namespace {

constexpr char kMagic[8] = {'W', 'A', 'S', 'T', 'E', 'P', 'S', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kCopyBytes = 4 << 20;  // a copy and a check read this much at a time

bool ReadAll(int fd, void* to, size_t n, uint64_t at) {
  auto* p = static_cast<uint8_t*>(to);
  while (n > 0) {
    const ssize_t got = pread(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, at += static_cast<uint64_t>(got), n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteAll(int fd, const void* from, size_t n, uint64_t at) {
  const auto* p = static_cast<const uint8_t*>(from);
  while (n > 0) {
    const ssize_t put = pwrite(fd, p, n, static_cast<off_t>(at));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      if (put == 0) errno = EIO;
      return false;
    }
    p += put, at += static_cast<uint64_t>(put), n -= static_cast<size_t>(put);
  }
  return true;
}

std::span<const uint8_t> Bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), n};
}

Status WriteError() { return Status::Error(std::string("writing: ") + std::strerror(errno)); }

}  // namespace

StateHeader NewStateHeader(const std::string& model, uid_t uid, uint64_t fingerprint,
                           size_t token_count, uint64_t bytes, double created) {
  StateHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.uid = uid;
  std::memcpy(h.model, model.data(), std::min(model.size(), kStateModelChars));
  h.fingerprint = fingerprint;
  h.token_count = static_cast<uint32_t>(token_count);
  h.payload_bytes = bytes;
  h.created_ms = static_cast<int64_t>(created * 1000);
  return h;
}

std::string StateNameOf(uid_t uid, uint64_t fingerprint, std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  };
  const uint32_t u = uid;
  mix(&u, sizeof u);
  mix(&fingerprint, sizeof fingerprint);
  mix(tokens.data(), tokens.size_bytes());
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.state", static_cast<unsigned long long>(h));
  return name;
}

Result<StateFileInfo> ReadStateHeader(int fd, const std::string& model) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return Status::Error("not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  StateHeader h{};
  if (size < sizeof h || !ReadAll(fd, &h, sizeof h, 0))
    return Status::Error("truncated: " + std::to_string(size) + " bytes, less than a header");
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return Status::Error("not a prompt state");
  if (h.version != kVersion)
    return Status::Error("version " + std::to_string(h.version) + ", this wasted reads " +
                         std::to_string(kVersion));
  if (std::string(h.model, kStateModelChars) != model)
    return Status::Error("a state of another container (" +
                         std::string(h.model, kStateModelChars) + ", this one is " + model + ")");
  if (h.token_count == 0 || h.token_count > kMaxStateTokens)
    return Status::Error(std::to_string(h.token_count) + " tokens, out of range");
  const uint64_t offset = sizeof h + uint64_t{h.token_count} * 4;
  if (h.payload_bytes == 0 || h.payload_bytes > size || size - h.payload_bytes != offset)
    return Status::Error(std::to_string(size) + " bytes, where its header says " +
                         std::to_string(offset) + " + " + std::to_string(h.payload_bytes) +
                         " (truncated or grown)");
  StateFileInfo info;
  info.tokens.resize(h.token_count);
  if (!ReadAll(fd, info.tokens.data(), info.tokens.size() * 4, sizeof h))
    return Status::Error("cannot read its tokens");
  info.uid = h.uid;
  info.fingerprint = h.fingerprint;
  info.payload_offset = offset;
  info.payload_bytes = h.payload_bytes;
  info.created = static_cast<double>(h.created_ms) / 1000;
  return info;
}

Status CheckStateChecksum(int fd) {
  struct stat st {};
  StateHeader h{};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof h ||
      !ReadAll(fd, &h, sizeof h, 0))
    return Status::Error("cannot read its header");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint32_t want = h.crc;
  h.crc = 0;
  uint32_t crc = format::Crc32(Bytes(&h, sizeof h));
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kCopyBytes, size)));
  for (uint64_t at = sizeof h; at < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - at));
    if (!ReadAll(fd, buf.data(), n, at)) return Status::Error("cannot read its bytes");
    crc = format::Crc32(Bytes(buf.data(), n), crc);
    at += n;
  }
  if (crc != want) return Status::Error("its checksum does not match its bytes (damaged)");
  return Status::Ok();
}

Status WriteState(int out, StateHeader h, std::span<const int32_t> tokens, int from,
                  uint64_t bytes) {
  h.crc = 0;
  uint32_t crc = format::Crc32(Bytes(&h, sizeof h));
  crc = format::Crc32(Bytes(tokens.data(), tokens.size_bytes()), crc);
  uint64_t at = sizeof h;
  if (!WriteAll(out, tokens.data(), tokens.size_bytes(), at)) return WriteError();
  at += tokens.size_bytes();
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kCopyBytes, bytes)));
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - done));
    if (!ReadAll(from, buf.data(), n, done))
      return Status::Error("the state's descriptor gave fewer than the " + std::to_string(bytes) +
                           " bytes announced");
    if (!WriteAll(out, buf.data(), n, at)) return WriteError();
    crc = format::Crc32(Bytes(buf.data(), n), crc);
    done += n, at += n;
  }
  h.crc = crc;  // last: a state cut short has a header that fails its check
  if (!WriteAll(out, &h, sizeof h, 0)) return WriteError();
  return Status::Ok();
}

Status CopyState(int from, int out, uint64_t bytes) {
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kCopyBytes, bytes)));
  for (uint64_t at = 0; at < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - at));
    if (!ReadAll(from, buf.data(), n, at)) return Status::Error("cannot read the state");
    if (!WriteAll(out, buf.data(), n, at)) return WriteError();
    at += n;
  }
  return Status::Ok();
}

}  // namespace waste::daemon

// The shared segments: the trunk packed into a sealed, wired memfd, and the
// expert cache with its slot table (daemon.h).
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/daemon.h"
#include "engine/format/trunk_pack.h"
#include "engine/plan/plan.h"  // SlotStride

namespace waste::daemon {

namespace {
// "transparent huge pages", or "4 KiB pages (why no huge ones)".
std::string PagesOf(const shm::Segment& seg) {
  std::string s = shm::PageKindName(seg.page_kind());
  if (!seg.why_small_pages().empty()) s += " (" + seg.why_small_pages() + ")";
  return s;
}
}  // namespace

Status Daemon::BuildTrunk() {
  auto t = Clock::now();
  const uint64_t bytes = PackedTrunkBytes(ct_->manifest());
  auto seg = shm::Segment::Create("wasted-trunk", bytes, opt_.huge_pages);
  if (!seg.ok()) return seg.status().Prefixed("trunk segment");
  trunk_seg_ = std::move(*seg);
  {
    auto rw = shm::Mapping::Map(trunk_seg_.fd(), trunk_seg_.size(), true, true);
    if (!rw.ok()) return rw.status().Prefixed("trunk segment");
    WASTE_RETURN_IF_ERROR(PackTrunk(*ct_, rw->data(), rw->size()));
  }  // the writable mapping goes before the seal
  const double load_ms = MsSince(t);
  if (trunk_seg_.page_kind() != shm::PageKind::kHugetlb) {
    WASTE_RETURN_IF_ERROR(trunk_seg_.Seal());
  }
  auto ro = shm::Mapping::Map(trunk_seg_.fd(), trunk_seg_.size(), false, true);
  if (!ro.ok()) return ro.status().Prefixed("trunk segment");
  trunk_map_ = std::move(*ro);
  if (opt_.wire_trunk) {
    if (mlock(trunk_map_.data(), trunk_map_.size()) == 0) {
      trunk_wired_ = true;
    } else {
      const int err = errno;
      rlimit lim{};
      getrlimit(RLIMIT_MEMLOCK, &lim);
      spdlog::warn(
          "trunk NOT wired: mlock of {} failed ({}); the memlock limit is {}. Raise it "
          "(`ulimit -l unlimited`, or LimitMEMLOCK=infinity in the systemd unit) or run "
          "with --no-wire; unwired, the kernel may page the trunk out under pressure",
          FormatSize(trunk_map_.size()), std::strerror(err),
          lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : FormatSize(lim.rlim_cur));
    }
  }
  spdlog::info("trunk: {} packed into a memfd in {:.0f} ms ({:.2f} GB/s), {}, {}, {}",
               FormatSize(bytes), load_ms, bytes / load_ms / 1e6,
               PagesOf(trunk_seg_), trunk_seg_.page_kind() == shm::PageKind::kHugetlb ? "not sealable (hugetlb)"
                                                                 : "sealed",
               trunk_wired_ ? "wired" : "not wired");
  return Status::Ok();
}

Status Daemon::BuildCache() {
  auto t = Clock::now();
  const ModelConfig& c = ct_->config();
  const uint64_t stride = SlotStride(ct_->manifest());
  const uint64_t records = uint64_t(c.n_experts) * c.n_moe_layers();
  if (budget_ < trunk_seg_.size() + overhead_ + stride)
    return Status::Error("the budget " + FormatSize(budget_) + " leaves no room for the cache");
  const uint64_t room = budget_ - trunk_seg_.size() - overhead_;
  // The segment may be rounded up to whole huge pages: keep that inside the room too.
  uint64_t slots = std::min<uint64_t>(records, room / stride);
  while (slots > 0 && shm::Segment::SizeFor(slots * stride, opt_.huge_pages) > room) --slots;
  if (slots == 0 || slots > 0xfffffff0u)
    return Status::Error("the budget leaves room for " + std::to_string(slots) + " cache slots");
  auto seg = shm::Segment::Create("wasted-cache", slots * stride, opt_.huge_pages);
  if (!seg.ok()) return seg.status().Prefixed("cache segment");
  cache_seg_ = std::move(*seg);
  // Populated now: a fresh page costs a slow first touch on this kind of
  // machine, better paid at start than in the middle of a read.
  auto rw = shm::Mapping::Map(cache_seg_.fd(), cache_seg_.size(), true, true);
  if (!rw.ok()) return rw.status().Prefixed("cache segment");
  cache_map_ = std::move(*rw);

  const uint32_t layers = static_cast<uint32_t>(c.n_layers);
  const uint32_t experts = static_cast<uint32_t>(c.n_experts);
  const uint64_t table_bytes = shm::SlotTable::BytesFor(layers, experts, static_cast<uint32_t>(slots));
  auto tseg = shm::Segment::Create("wasted-table", table_bytes, false);
  if (!tseg.ok()) return tseg.status().Prefixed("slot table");
  table_seg_ = std::move(*tseg);
  auto tmap = shm::Mapping::Map(table_seg_.fd(), table_seg_.size(), true, true);
  if (!tmap.ok()) return tmap.status().Prefixed("slot table");
  table_map_ = std::move(*tmap);
  auto table = shm::SlotTable::Init(table_map_.data(), table_map_.size(), layers, experts,
                                    static_cast<uint32_t>(slots), ct_->record_bytes(), stride);
  if (!table.ok()) return table.status();
  // Written before any client can attach; clients read it from the header.
  const uint32_t pins_cap =
      opt_.max_pins_per_client
          ? opt_.max_pins_per_client
          : std::max<uint32_t>(static_cast<uint32_t>(c.top_k), static_cast<uint32_t>(slots / 4));
  table->header().pins_per_client = std::clamp<uint32_t>(pins_cap, 1, shm::kPinsPerClient);
  std::vector<bool> has_bank(layers);
  for (uint32_t L = 0; L < layers; ++L) has_bank[L] = ct_->manifest().Bank(static_cast<int>(L));
  cache_ = std::make_unique<SlotCache>(*table, has_bank, ct_->record_bytes(), opt_.policy,
                                       opt_.max_queued_per_client);

  // Clients get descriptors that cannot be mapped writable.
  for (auto [seg_ptr, out] : {std::pair{&trunk_seg_, &trunk_ro_}, std::pair{&cache_seg_, &cache_ro_},
                              std::pair{&table_seg_, &table_ro_}}) {
    auto fd = seg_ptr->ReadOnlyFd();
    if (!fd.ok()) return fd.status();
    *out = *fd;
  }
  served_.container = ct_->dir();
  served_.fingerprint = fingerprint_;
  served_.arch = c.architecture;
  served_.layers = layers;
  served_.experts = experts;
  served_.top_k = static_cast<uint32_t>(c.top_k);
  served_.slots = static_cast<uint32_t>(slots);
  served_.record_bytes = ct_->record_bytes();
  served_.slot_stride = stride;
  served_.has_bank = has_bank;
  served_.trunk_fd = trunk_ro_;
  served_.cache_fd = cache_ro_;
  served_.table_fd = table_ro_;
  served_.trunk_bytes = trunk_seg_.size();
  served_.cache_bytes = cache_seg_.size();
  served_.table_bytes = table_seg_.size();
  spdlog::info("cache: {} slots of {} ({} of {} records, {:.0f}%), {}, populated in {:.0f} ms; "
               "per client at most {} pins and {} reads queued",
               slots, FormatSize(stride), slots, records, 100.0 * slots / records,
               PagesOf(cache_seg_), MsSince(t), table->pins_per_client(),
               opt_.max_queued_per_client);
  if (opt_.huge_pages && cache_seg_.page_kind() == shm::PageKind::kSmall)
    spdlog::info(
        "no huge pages for the cache: every client maps it 4 KiB at a time, which costs attach "
        "time and decode speed (docs/MEASUREMENTS.md); ops/README.md says how to allow them");
  return Status::Ok();
}

}  // namespace waste::daemon

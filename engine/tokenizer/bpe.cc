#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

namespace waste::tokenizer {
namespace {

constexpr int32_t kNoMerge = std::numeric_limits<int32_t>::max();
// Pieces up to this many bytes use the scan, which is faster when short.
constexpr size_t kScanMaxBytes = 128;

int32_t RankOr(const RankTable& ranks, std::string_view bytes) {
  const int32_t r = ranks.Find(bytes);
  return r < 0 ? kNoMerge : r;
}

}  // namespace

size_t RankTable::Hash::operator()(std::string_view s) const noexcept {
  // FNV-1a: tokens are short, and this is cheaper than the library's hash.
  uint64_t h = 1469598103934665603ull;
  for (const char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return static_cast<size_t>(h ^ (h >> 32));
}

RankTable::RankTable(const std::vector<std::string>& tokens) {
  size_t total = 0;
  for (const std::string& t : tokens) total += t.size();
  blob_.reserve(total);
  offsets_.reserve(tokens.size() + 1);
  for (const std::string& t : tokens) {
    blob_.insert(blob_.end(), t.begin(), t.end());
    offsets_.push_back(blob_.size());
    max_len_ = std::max(max_len_, t.size());
  }
  index_.reserve(tokens.size());
  for (int32_t r = 0; r < size(); ++r) index_.emplace(Bytes(r), r);
}

void BytePairEncodeScan(std::string_view piece, const RankTable& ranks, std::vector<int32_t>* out) {
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out->push_back(ranks.Find(piece));
    return;
  }
  // parts[i] = (start of part i, rank of merging part i with part i + 1);
  // two sentinels at the end so parts[i + 3] is always there when needed.
  std::vector<std::pair<size_t, int32_t>> parts;
  parts.reserve(n + 1);
  std::pair<int32_t, size_t> min{kNoMerge, 0};
  for (size_t i = 0; i + 1 < n; ++i) {
    const int32_t r = RankOr(ranks, piece.substr(i, 2));
    if (r < min.first) min = {r, i};
    parts.emplace_back(i, r);
  }
  parts.emplace_back(n - 1, kNoMerge);
  parts.emplace_back(n, kNoMerge);
  // The rank of part i merged with i + 1 and i + 2, before i + 1 is removed.
  const auto rank_after = [&](size_t i) {
    if (i + 3 >= parts.size()) return kNoMerge;
    return RankOr(ranks, piece.substr(parts[i].first, parts[i + 3].first - parts[i].first));
  };
  while (min.first != kNoMerge) {
    const size_t i = min.second;
    if (i > 0) parts[i - 1].second = rank_after(i - 1);
    parts[i].second = rank_after(i);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    min = {kNoMerge, 0};
    for (size_t k = 0; k + 1 < parts.size(); ++k)
      if (parts[k].second < min.first) min = {parts[k].second, k};
  }
  for (size_t k = 0; k + 1 < parts.size(); ++k)
    out->push_back(ranks.Find(piece.substr(parts[k].first, parts[k + 1].first - parts[k].first)));
}

void BytePairEncodeHeap(std::string_view piece, const RankTable& ranks, std::vector<int32_t>* out) {
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out->push_back(ranks.Find(piece));
    return;
  }
  // Parts are named by their first byte; next[i] is the start of the part
  // after part i (n past the last), prev[i] the start of the one before.
  std::vector<uint32_t> next(n), prev(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    next[i] = static_cast<uint32_t>(i + 1);
    prev[i] = static_cast<uint32_t>(i) - 1;  // wraps for part 0, never read there
  }
  // A candidate merge of the part at `start` (ending at `mid`) with the part
  // from `mid` to `end`; stale once either part has changed.
  struct Cand {
    int32_t rank;
    uint32_t start, mid, end;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  // A binary heap on a vector, built in one pass from the first pairs.
  std::vector<Cand> heap;
  heap.reserve(n);
  const auto cand = [&](uint32_t start, uint32_t mid, uint32_t end) {
    return Cand{ranks.Find(piece.substr(start, end - start)), start, mid, end};
  };
  for (uint32_t i = 0; i + 1 < n; ++i) {
    const Cand c = cand(i, i + 1, i + 2);
    if (c.rank >= 0) heap.push_back(c);
  }
  const std::greater<Cand> later;
  std::make_heap(heap.begin(), heap.end(), later);
  const auto push = [&](uint32_t start, uint32_t mid, uint32_t end) {
    const Cand c = cand(start, mid, end);
    if (c.rank < 0) return;
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), later);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    if (!alive[c.start] || next[c.start] != c.mid || c.mid >= n || next[c.mid] != c.end) continue;
    // Merge: the part at c.mid joins the part at c.start.
    alive[c.mid] = 0;
    next[c.start] = c.end;
    if (c.end < n) prev[c.end] = c.start;
    if (c.start > 0) push(prev[c.start], c.start, c.end);
    if (c.end < n) push(c.start, c.end, next[c.end]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out->push_back(ranks.Find(piece.substr(i, next[i] - i)));
}

void BytePairEncode(std::string_view piece, const RankTable& ranks, std::vector<int32_t>* out) {
  if (piece.size() <= kScanMaxBytes) {
    BytePairEncodeScan(piece, ranks, out);
    return;
  }
  // The heap names parts by 32-bit offsets: a piece of 4 GiB or more (one
  // run of a single character class that long) goes in 2 GiB slices.
  constexpr size_t kSlice = size_t{1} << 31;
  for (size_t off = 0; off < piece.size(); off += kSlice)
    BytePairEncodeHeap(piece.substr(off, kSlice), ranks, out);
}

void BytePairEncodeMerges(std::string_view piece, const RankTable& ranks, const MergeTable& merges,
                          std::vector<int32_t>* out) {
  const size_t n = piece.size();
  if (n == 0) return;
  // Parts are named by the offset of their first byte; part i runs to
  // next[i]. A piece of 4 GiB or more goes in 2 GiB slices, as in
  // BytePairEncode.
  constexpr size_t kSlice = size_t{1} << 31;
  if (n > kSlice) {
    for (size_t off = 0; off < n; off += kSlice)
      BytePairEncodeMerges(piece.substr(off, kSlice), ranks, merges, out);
    return;
  }
  std::vector<int32_t> id(n);
  std::vector<uint32_t> next(n), prev(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    id[i] = ranks.Find(piece.substr(i, 1));
    next[i] = static_cast<uint32_t>(i + 1);
    prev[i] = static_cast<uint32_t>(i) - 1;  // wraps for part 0, never read there
  }
  // A candidate merge of the part at `pos` with the part after it, which
  // gives `result`; stale once either part has changed (tokenizers checks
  // the pair still merges to the same token).
  struct Cand {
    int32_t rank, result;
    uint32_t pos;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> heap;
  const std::greater<Cand> later;
  const auto push = [&](uint32_t pos) {
    const uint32_t right = next[pos];
    if (right >= n) return;
    const MergeTable::Merge* m = merges.Find(id[pos], id[right]);
    if (!m) return;
    heap.push_back({m->rank, m->result, pos});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    if (!alive[c.pos] || next[c.pos] >= n) continue;
    const uint32_t right = next[c.pos];
    const MergeTable::Merge* m = merges.Find(id[c.pos], id[right]);
    if (!m || m->result != c.result) continue;
    id[c.pos] = c.result;
    alive[right] = 0;
    next[c.pos] = next[right];
    if (next[c.pos] < n) prev[next[c.pos]] = c.pos;
    if (c.pos > 0) push(prev[c.pos]);
    push(c.pos);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out->push_back(id[i]);
}

}  // namespace waste::tokenizer

#include "engine/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace waste::tokenizer {
namespace {

struct Ccc {
  uint32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second 0: a singleton
  bool composite;              // NFC composes first + second back into cp
};

#include "engine/tokenizer/nfc_tables.inc"

// Hangul syllables, composed and decomposed by arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

int CombiningClass(uint32_t cp) {
  const auto it = std::lower_bound(std::begin(kCcc), std::end(kCcc), cp,
                                   [](const Ccc& c, uint32_t v) { return c.cp < v; });
  return it != std::end(kCcc) && it->cp == cp ? it->ccc : 0;
}

const Decomposition* DecompositionOf(uint32_t cp) {
  const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                   [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  return it != std::end(kDecompositions) && it->cp == cp ? &*it : nullptr;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = DecompositionOf(cp);
  if (!d) {
    out->push_back(cp);
    return;
  }
  Decompose(d->first, out);
  if (d->second != 0) Decompose(d->second, out);
}

// The primary composite of a + b, or 0.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  static const std::unordered_map<uint64_t, uint32_t> pairs = [] {
    std::unordered_map<uint64_t, uint32_t> m;
    for (const Decomposition& d : kDecompositions)
      if (d.composite) m[(uint64_t{d.first} << 32) | d.second] = d.cp;
    return m;
  }();
  const auto it = pairs.find((uint64_t{a} << 32) | b);
  return it == pairs.end() ? 0 : it->second;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 63)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 63)));
    out->push_back(static_cast<char>(0x80 | (cp & 63)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 63)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 63)));
    out->push_back(static_cast<char>(0x80 | (cp & 63)));
  }
}

}  // namespace

std::string Nfc(std::string_view s) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(s);
  std::vector<uint32_t> d;
  d.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 31 : n == 3 ? c & 15 : c & 7;
    for (int k = 1; k < n && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 63);
    Decompose(cp, &d);
    i += n;
  }
  // Canonical ordering: a stable sort of each run of non-starters by class.
  std::vector<int> cls(d.size());
  for (size_t i = 0; i < d.size(); ++i) cls[i] = CombiningClass(d[i]);
  for (size_t i = 0; i < d.size();) {
    if (cls[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && cls[j] != 0) ++j;
    std::vector<std::pair<int, uint32_t>> run;
    for (size_t k = i; k < j; ++k) run.push_back({cls[k], d[k]});
    std::stable_sort(run.begin(), run.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = i; k < j; ++k) cls[k] = run[k - i].first, d[k] = run[k - i].second;
    i = j;
  }
  // Canonical composition: each character joins the last starter unless a
  // character of the same or a higher class, or a starter, stands between.
  size_t out = 0;
  std::ptrdiff_t starter = -1;
  int last = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const int c = cls[i];
    if (starter >= 0 && (out == static_cast<size_t>(starter) + 1 || last < c)) {
      if (const uint32_t composite = Compose(d[starter], d[i])) {
        d[starter] = composite;
        continue;
      }
    }
    if (c == 0) starter = static_cast<std::ptrdiff_t>(out);
    last = c;
    d[out] = d[i];
    cls[out] = c;
    ++out;
  }
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0; i < out; ++i) AppendUtf8(d[i], &r);
  return r;
}

}  // namespace waste::tokenizer

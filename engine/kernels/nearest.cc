#include "engine/kernels/nearest.h"

#include <limits>

#include "engine/kernels/simd.h"

namespace waste::kernels {

int32_t NearestEntryScalar(const float* x, const float* books, const float* norms, int entries) {
  int32_t best = 0;
  float best_d = std::numeric_limits<float>::infinity();
  for (int e = 0; e < entries; ++e) {
    const float* c = books + e * 8;
    float dot = 0.f;
    for (int i = 0; i < 8; ++i) dot += x[i] * c[i];
    const float d = norms[e] - 2.f * dot;
    if (d < best_d) best_d = d, best = e;
  }
  return best;
}

NearestEntry::NearestEntry(const float* books, int entries, Isa isa)
    : entries_(entries),
      isa_(UsableIsa(isa)),
      books_(books, books + int64_t{entries} * 8),
      norms_(static_cast<size_t>(entries)) {
  for (int e = 0; e < entries; ++e) {
    float s = 0.f;
    for (int i = 0; i < 8; ++i) s += books[e * 8 + i] * books[e * 8 + i];
    norms_[e] = s;
  }
  if (isa_ == Isa::kScalar) return;
  const int lanes = isa_ >= Isa::kAvx512 ? 16 : 8;
  chunks_ = (entries + lanes - 1) / lanes;
  lanes_books_.assign(static_cast<size_t>(chunks_) * 8 * lanes, 0.f);
  lanes_norms_.assign(static_cast<size_t>(chunks_) * lanes, std::numeric_limits<float>::infinity());
  for (int e = 0; e < entries; ++e) {
    const int c = e / lanes, l = e % lanes;
    for (int d = 0; d < 8; ++d)
      lanes_books_[(static_cast<size_t>(c) * 8 + d) * lanes + l] = books[e * 8 + d];
    lanes_norms_[static_cast<size_t>(c) * lanes + l] = norms_[e];
  }
}

void NearestEntry::Find(const float* x, int64_t n, int32_t* out) const {
  if (isa_ >= Isa::kAvx512) {
    avx512::NearestEntries(lanes_books_.data(), lanes_norms_.data(), chunks_, x, n, out);
  } else if (isa_ >= Isa::kAvx2) {
    avx2::NearestEntries(lanes_books_.data(), lanes_norms_.data(), chunks_, x, n, out);
  } else {
    for (int64_t j = 0; j < n; ++j)
      out[j] = NearestEntryScalar(x + j * 8, books_.data(), norms_.data(), entries_);
  }
}

}  // namespace waste::kernels

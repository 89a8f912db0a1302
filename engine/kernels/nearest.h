// The nearest codebook entry to 8-dim vectors, as `waste convert` needs it
// (k-means assignment and the greedy residual search of each expert,
// engine/convert/vq_fit.h).
//
// The rule, which every path follows to the bit:
//   norm[e] = sum over d = 0..7 of c[d] * c[d], added in that order from 0.f
//   dot[e]  = sum over d = 0..7 of x[d] * c[d], added in that order from 0.f
//   dist[e] = norm[e] - 2.f * dot[e]            (float32, no fused multiply-add)
//   nearest = the lowest e with dist[e] < dist of every lower entry, i.e. the
//             first minimum; an entry whose dist is NaN is never chosen, and
//             when no dist is below +inf the answer is 0.
// The SIMD paths put entries in the lanes (16 per AVX-512 register, 8 per
// AVX2 one) and loop over the dimensions in the same order, so each lane
// computes exactly the scalar float operations of its entry; the first
// minimum is then recovered from the per-lane minima (docs/DESIGN.md,
// "waste convert").
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/cpu.h"

namespace waste::kernels {

class NearestEntry {
 public:
  // `books`: [entries][8] floats, copied. `isa` is lowered to what the CPU
  // supports. entries >= 1.
  NearestEntry(const float* books, int entries, Isa isa);

  // out[j] = the nearest entry to x[8j : 8j + 8] for j < n. Safe to call
  // from several threads at once.
  void Find(const float* x, int64_t n, int32_t* out) const;

  int entries() const { return entries_; }
  Isa isa() const { return isa_; }

 private:
  int entries_;
  Isa isa_;
  std::vector<float> books_;  // [entries][8], as given (the scalar path)
  std::vector<float> norms_;  // [entries]
  // The SIMD layout: [chunk][8 dims][lanes] coordinates and [chunk][lanes]
  // norms, lanes 16 (AVX-512) or 8 (AVX2); the last chunk's unused lanes
  // hold zero coordinates and a +inf norm, so their dist is +inf and never
  // below anything.
  int chunks_ = 0;
  std::vector<float> lanes_books_, lanes_norms_;
};

// The scalar rule above for one vector, given the norms. For tests and the
// scalar path.
int32_t NearestEntryScalar(const float* x, const float* books, const float* norms, int entries);

}  // namespace waste::kernels

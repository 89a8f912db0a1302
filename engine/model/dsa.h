// DeepSeek Sparse Attention's choice of positions (DeepSeek-V3.2): which of
// a query's positions MLA attends, given the lightning indexer's scores.
// The indexer itself is inside the MLA layer (dsa.cc, mla.cc).
#pragma once

#include <span>
#include <vector>

namespace waste {

// keep[t] = 1 for the `topk` positions t of the largest scores[t], 0 for the
// rest; every position when there are no more than topk. Equal scores go
// to the lower position (torch's topk leaves ties unspecified; the fixtures
// keep them off the boundary).
void DsaSelect(std::span<const float> scores, int topk, std::vector<char>& keep);

}  // namespace waste

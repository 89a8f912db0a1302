// Byte-pair encoding by rank, as tiktoken does it: a piece starts as single
// bytes, and the adjacent pair whose concatenation is the token of lowest
// rank is merged (the leftmost of equal ranks first) until no adjacent pair
// is a token. A rank file has no merge list: a token's rank is its merge
// priority and its id.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace waste::tokenizer {

// Token bytes by rank and rank by token bytes. Ranks are 0..size()-1.
// Movable, not copyable (the index points into the table's own bytes).
class RankTable {
 public:
  RankTable() = default;
  RankTable(RankTable&&) = default;
  RankTable& operator=(RankTable&&) = default;
  RankTable(const RankTable&) = delete;
  RankTable& operator=(const RankTable&) = delete;

  // Token i of `tokens` gets rank i. The tokens must be distinct.
  explicit RankTable(const std::vector<std::string>& tokens);

  int32_t size() const { return static_cast<int32_t>(offsets_.size()) - 1; }
  // The rank of these bytes, or -1.
  int32_t Find(std::string_view bytes) const {
    if (bytes.size() > max_len_) return -1;
    const auto it = index_.find(bytes);
    return it == index_.end() ? -1 : it->second;
  }
  std::string_view Bytes(int32_t rank) const {
    const size_t r = static_cast<size_t>(rank);
    return std::string_view(blob_.data() + offsets_[r], offsets_[r + 1] - offsets_[r]);
  }

 private:
  struct Hash {
    size_t operator()(std::string_view s) const noexcept;
  };
  std::vector<char> blob_;           // every token's bytes, back to back, by rank
  std::vector<size_t> offsets_{0};   // rank r is blob_[offsets_[r], offsets_[r + 1])
  std::unordered_map<std::string_view, int32_t, Hash> index_;  // views into blob_
  size_t max_len_ = 0;               // the longest token
};

// Appends the ids of `piece` (every single byte must be a token). Uses the
// quadratic scan for short pieces and the heap for long ones.
void BytePairEncode(std::string_view piece, const RankTable& ranks, std::vector<int32_t>* out);

// The merges of a Hugging Face BPE model, by pair: merging the parts with
// ids (left, right) has priority `rank` (its line in the merges list) and
// gives the token `result`. Only listed pairs merge, even when another
// split of the same token would also concatenate to it.
class MergeTable {
 public:
  struct Merge {
    int32_t rank, result;
  };
  // False if the pair is already listed.
  bool Add(int32_t left, int32_t right, Merge m) { return map_.emplace(Key(left, right), m).second; }
  const Merge* Find(int32_t left, int32_t right) const {
    const auto it = map_.find(Key(left, right));
    return it == map_.end() ? nullptr : &it->second;
  }
  size_t size() const { return map_.size(); }

 private:
  static uint64_t Key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  std::unordered_map<uint64_t, Merge> map_;
};

// Appends the ids of `piece` as tokenizers' BPE (Word::merge_all) gives
// them: the piece starts as its single bytes' tokens (`ranks` has all 256),
// and the listed adjacent pair of lowest rank merges, the leftmost of equal
// ranks first, until no adjacent pair is listed. No dropout, and no
// whole-piece lookup first (tokenizers' ignore_merges false).
void BytePairEncodeMerges(std::string_view piece, const RankTable& ranks, const MergeTable& merges,
                          std::vector<int32_t>* out);

// The two algorithms, exposed so the tests can hold them to each other.
// Quadratic: tiktoken's own loop (rescan all pairs after each merge).
void BytePairEncodeScan(std::string_view piece, const RankTable& ranks, std::vector<int32_t>* out);
// O(n log n): a min-heap of (rank, position) over a linked list of parts.
// Pieces below 4 GiB (BytePairEncode slices longer ones).
void BytePairEncodeHeap(std::string_view piece, const RankTable& ranks, std::vector<int32_t>* out);

}  // namespace waste::tokenizer

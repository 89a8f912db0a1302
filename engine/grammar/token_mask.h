// Which tokens may come next under a JsonMatcher: the mask that keeps a
// sampler's choices inside a JSON Schema.
//
// VocabIndex, made once per tokenizer, holds every ordinary token's bytes in
// a trie; a mask walks the trie with the matcher, so a prefix shared by many
// tokens is checked once and a refused byte prunes its whole subtree.
// Special tokens (chat markup, end of turn) are never in the index: they are
// never allowed inside a value (the caller allows its end-of-turn tokens
// once the value is complete()).
//
// Inside a string the walk would visit most of the trie, so there is a fast
// path: the "plain" tokens (whole UTF-8 characters, no '"', '\\' or control
// bytes) of at most the matcher's PlainRoom() code points are allowed at
// once, and only the other tokens are checked one by one.
//
// JsonTokenConstraint is the per-generation object: a matcher over one
// grammar, started at any point of a reply (a whole response_format reply,
// or a tool call's arguments once its markup has opened them), fed the
// chosen tokens, saying when the value is complete.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/json_matcher.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste::grammar {

class VocabIndex {
 public:
  // Ids 0..vocab-1; those the tokenizer does not know, or that are special, are never allowed.
  VocabIndex(const Tokenizer& tok, int vocab);
  int vocab() const { return vocab_; }
  // An ordinary token's bytes; empty for special and unknown ids.
  std::string_view bytes(int32_t id) const;

  // Sets allowed[id] (as bits: word id / 64, bit id % 64; the vector is
  // resized to the vocabulary) for every token whose bytes `m` accepts.
  // Returns how many are allowed.
  size_t Allowed(const JsonMatcher& m, std::vector<uint64_t>* allowed) const;
  // Sets allowed[id] (as Allowed does) for every token whose bytes are a
  // non-empty prefix of `text`. Returns how many.
  size_t Along(std::string_view text, std::vector<uint64_t>* allowed) const;

 private:
  struct Node {
    uint32_t first_child = 0;  // children are nodes [first_child, first_child + children)
    uint16_t children = 0;
    uint8_t byte = 0;
    int32_t token = -1;  // the token whose bytes end here
  };
  void Walk(uint32_t node, size_t depth, std::vector<JsonMatcher>& states,
            std::vector<uint64_t>* allowed, size_t* n) const;

  int vocab_;
  std::vector<Node> trie_;               // root first
  std::vector<uint64_t> plain_;          // bits: the plain tokens
  std::vector<int32_t> plain_by_chars_;  // the plain tokens, fewest code points first
  std::vector<size_t> plain_upto_;       // [c]: how many plain tokens have at most c code points
  std::vector<std::string> bytes_;       // by id
  std::vector<int32_t> others_;          // the ordinary tokens that are not plain
};

// What a generation's sampler may choose, token by token (the scheduler's
// Generation::constraint): a response_format's value, a tool call's markup
// and arguments (serve/tool_constraint.h).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of the tokens that may not come next to -infinity.
  // Returns how many may.
  virtual size_t Mask(std::span<float> logits) = 0;
  // Feeds the chosen token: false if the mask did not allow it (the
  // constraint is then dead: nothing more is allowed).
  virtual bool Accept(int32_t token) = 0;
  // The reply may end here (its end-of-turn tokens are allowed).
  virtual bool complete() const = 0;
  // The reply ends here: nothing more may come.
  virtual bool finished() const = 0;
};

class JsonTokenConstraint : public TokenConstraint {
 public:
  // `max_tokens` (0: no limit): the tokens the value may take, its reply's
  // end of turn included. Once the tokens left come within the matcher's
  // Closing() bytes plus a slack (the most one token may add to them: the
  // grammar's longest shortest instance, plus 32 bytes), only tokens along
  // Closing() are allowed, so the value ends in time: each such token takes
  // at least one of its bytes, and none are left for the end of turn. A
  // vocabulary without a token along it, or a token that adds more than
  // the slack, can still leave a value cut by max_tokens.
  JsonTokenConstraint(std::shared_ptr<const JsonGrammar> g, std::shared_ptr<const VocabIndex> vocab,
                      int64_t max_tokens = 0);

  // Ids past the index's vocabulary are never allowed; special tokens neither.
  size_t Mask(std::span<float> logits) override;
  // Feeds a chosen token's bytes.
  bool Accept(int32_t token) override;
  bool complete() const override { return m_.complete(); }
  bool finished() const override { return m_.finished(); }

 private:
  // Sets allowed_ to the tokens along Closing() when the tokens left call
  // for it (*n: how many); false when they do not.
  bool Closing(size_t* n);

  JsonMatcher m_;
  std::shared_ptr<const VocabIndex> vocab_;
  std::vector<uint64_t> allowed_;
  int64_t left_ = -1;  // tokens the reply may still take (-1: no limit)
  uint64_t slack_ = 0;
};

}  // namespace waste::grammar

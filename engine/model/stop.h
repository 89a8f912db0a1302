// Stop strings that may straddle token boundaries. Generated text is fed in
// as it is decoded; what cannot be the start of a stop string is released at
// once, what might be is held back until the next piece decides it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace waste {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds `piece`; returns the text that is now safe to show. After a stop
  // string is seen, stopped() is true and nothing from it on is returned.
  std::string Feed(std::string_view piece);
  // The text still held back (at the end of generation without a stop).
  std::string Flush();
  bool stopped() const { return stopped_; }
  // Once stopped: the stop string that was seen (the first listed of those
  // ending at the earliest place); empty before.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace waste

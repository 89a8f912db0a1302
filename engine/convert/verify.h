// `waste verify`: a container checked end to end, optionally against the
// checkpoint it came from.
//
//   - manifest, trunk bounds, codebooks and bank sizes (Container::Open);
//   - every expert record's header and crc32;
//   - every trunk tensor read back: F32 values and grouped scales finite;
//   - with the source: the relative error ||W - Q|| / ||W|| of every expert
//     matrix and every trunk matrix, decoded from the container as the
//     engine decodes it, against the checkpoint's weights.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace waste::convert {

struct VerifyOptions {
  std::string container;
  std::string source;  // empty: no comparison
  std::function<void(std::string_view)> progress;
};

struct VerifyLayer {
  int layer = 0;
  double mean_rel_error = 0, max_rel_error = 0;  // over its 3 x experts matrices
};

struct VerifyReport {
  int records = 0;        // expert records checked (header and crc32)
  int trunk_tensors = 0;  // trunk tensors read back
  std::vector<std::string> problems;  // each names the file and the record or tensor
  bool compared = false;              // a source was given
  std::vector<VerifyLayer> layers;    // with a source
  double trunk_max_rel_error = 0;     // with a source: the worst trunk matrix
  std::string trunk_worst;            // ... and its name
};

// Fails only when the container cannot be opened (or the source read);
// damage found inside is listed in problems.
Result<VerifyReport> Verify(const VerifyOptions& o);

}  // namespace waste::convert

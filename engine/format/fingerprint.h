// A container's fingerprint: a hash of its parsed manifest (config, trunk
// index, banks, record layout). The daemon reports the fingerprint of what it
// serves; a client checks it against the container it opened before it
// reads a single shared byte as that container's trunk or records.
#pragma once

#include <string>

#include "engine/format/container.h"

namespace waste {

// 16 hex digits (FNV-1a, 64 bit, of the manifest's canonical JSON).
std::string ManifestFingerprint(const Manifest& m);

}  // namespace waste

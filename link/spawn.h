// Starting a daemon for a compute command that found none (`--spawn`).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace waste {

// Starts `wasted CONTAINER --socket SOCKET --idle-exit SECONDS [extra...]`
// (the wasted next to this program, else on PATH) and waits until it
// listens or has failed.
Status SpawnDaemon(const std::string& container, const std::string& socket, double idle_exit,
                   const std::vector<std::string>& extra);

}  // namespace waste

// Attaching a compute command to wasted: connect (or start a daemon with
// --spawn), attach, check that the daemon serves the container this command
// opened, map the segments, and build the shared expert source over them.
#pragma once

#include <memory>
#include <string>

#include "engine/experts/shared_source.h"
#include "engine/format/container.h"
#include "protocol/client.h"
#include "shm/segment.h"

namespace waste::cli {

// Everything an attached engine holds of the daemon. Members are declared
// so that they are destroyed in a safe order: the source (dropping its pins)
// first, the connection last.
struct DaemonLink {
  std::string socket;
  std::unique_ptr<DaemonClient> client;
  Attachment attachment;
  shm::Mapping trunk, cache, table, pins;
  std::unique_ptr<HintSink> sink;
  std::unique_ptr<SharedExpertSource> source;
};

// Attaches through an open connection; `ct` is the container the caller
// opened, which must be the one the daemon serves.
Result<std::unique_ptr<DaemonLink>> AttachDaemon(std::unique_ptr<DaemonClient> client,
                                                 const std::string& socket, const Container& ct);

// Starts `wasted CONTAINER --socket SOCKET --idle-exit SECONDS [extra...]`
// (the wasted next to this program, else on PATH) and waits until it
// listens or has failed.
Status SpawnDaemon(const std::string& container, const std::string& socket, double idle_exit,
                   const std::vector<std::string>& extra);

}  // namespace waste::cli

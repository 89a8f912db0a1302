// Attaching a compute command to wasted: attach through an open connection,
// check that the daemon serves the container this command opened, map the
// segments, and build the shared expert source over them (spawn.h starts a
// daemon when there is none).
#pragma once

#include <memory>
#include <string>

#include "engine/format/container.h"
#include "link/daemon_client.h"
#include "link/shared_source.h"
#include "shm/segment.h"

namespace waste {

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

}  // namespace waste

// Attaching a compute command to wasted: attach through an open connection,
// check that the daemon serves the container this command opened, map the
// segments, and build the shared expert source over them (spawn.h starts a
// daemon when there is none); and attaching again, to the daemon that
// serves the same container after the first went away (a restart).
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
  shm::SlotTable slots;  // over `table`
  std::unique_ptr<HintSink> sink;
  std::unique_ptr<SharedExpertSource> source;

  // Ok while the daemon serves this link; once its connection has ended or
  // it has said it is stopping, why ("wasted went away: ..."). A look at
  // what is known already: runs nothing, never blocks. After a failure the
  // mappings stay readable, but nothing in them is kept up any more: drop
  // the link (and everything built over it) to give their memory back.
  Status Health() const;
};

// Attaches through an open connection; `ct` is the container the caller
// opened, which must be the one the daemon serves.
Result<std::unique_ptr<DaemonLink>> AttachDaemon(std::unique_ptr<DaemonClient> client,
                                                 const std::string& socket, const Container& ct);

// How long a client whose daemon went away waits by default for one to
// serve the same container again (waste run/chat --reattach-wait).
inline constexpr double kDefaultReattachWait = 30;

// After the daemon behind a link went away (its Health failed, `gone` being
// that status's message), attaches to the next one that serves `ct` at
// `socket`: tries to connect every 100 ms for up to `wait_seconds`, skipping
// a daemon that is stopping or that closes the connection before the attach
// is answered (one still loading is waited for by its attach). The caller
// has dropped the old link first, so that a new daemon does not find its
// memory still taken. Fails, with a message that begins with `gone`, when
// no daemon serves within the time, when the one that serves there serves
// another container (both named, with their fingerprints), or when a daemon
// refuses the attach.
Result<std::unique_ptr<DaemonLink>> ReattachDaemon(const std::string& socket, const Container& ct,
                                                   double wait_seconds, const std::string& gone);

}  // namespace waste

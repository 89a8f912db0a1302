// The systemd readiness protocol (sd_notify(3)), written by hand: one
// datagram of `KEY=value` lines to the Unix socket named by $NOTIFY_SOCKET.
// With no NOTIFY_SOCKET (not started by systemd with Type=notify) it does
// nothing. A path starting with '@' names an abstract socket, as systemd
// allows.
#pragma once

#include <string>

#include "base/status.h"

namespace waste::daemon {

// Sends `state` (e.g. "READY=1\nSTATUS=serving") to the service manager.
// Ok when there is no manager to tell; an error names the socket and why.
Status NotifyServiceManager(const std::string& state);

}  // namespace waste::daemon

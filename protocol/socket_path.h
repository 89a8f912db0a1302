// Where wasted listens and where its clients look for it: one definition
// for the daemon, `waste` and `wastectl`.
#pragma once

#include <string>

namespace waste {

// The system service's socket (ops/wasted.service). Instances of the
// template unit wasted@NAME listen on /run/wasted/NAME.sock.
inline constexpr const char* kSystemDaemonSocket = "/run/wasted/wasted.sock";

// Where wasted listens unless told otherwise: $XDG_RUNTIME_DIR/wasted.sock
// when that variable is set and not empty (a user's own daemon, e.g. one
// `waste run --spawn` starts), else kSystemDaemonSocket (root, and the
// systemd unit, which runs without XDG_RUNTIME_DIR).
std::string DefaultDaemonSocket();

// Where a client connects unless told otherwise: DefaultDaemonSocket() when
// a socket is there, else kSystemDaemonSocket when a socket is there (a
// logged-in user reaching the system service), else DefaultDaemonSocket()
// (so a "not listening" message and --spawn name the user's own path).
std::string ClientDaemonSocket();

}  // namespace waste

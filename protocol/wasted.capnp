# The protocol between wasted and its clients (compute clients and wastectl),
# Cap'n Proto RPC over a Unix socket. Version 1 is a draft: the daemon that
# serves it lands with issue 4, and this file changes with it.
#
# Shape: a client calls Daemon.attach with its protocol version; the daemon
# answers with a Session, the model's description and the shared-memory
# segments (file descriptors passed with the capability). Hints are fire and
# forget; a ready slot is found and pinned in shared memory without any call.

@0x8a0e69d55616bddf;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("waste::proto");

const protocolVersion :UInt32 = 1;

enum HintKind {
  demand @0;     # needed now
  lookahead @1;  # predicted for a coming layer
  warm @2;       # background warm-up, lowest priority
}

struct ClientInfo {
  pid @0 :UInt32;
  command @1 :Text;
}

struct ModelDescription {
  arch @0 :Text;
  layers @1 :UInt32;
  experts @2 :UInt32;
  topK @3 :UInt32;
  recordBytes @4 :UInt64;
}

interface Session {
  hint @0 (layer :UInt32, experts :List(UInt32), kind :HintKind);
  detach @1 ();
}

interface Daemon {
  attach @0 (client :ClientInfo, version :UInt32)
      -> (session :Session, model :ModelDescription);
}

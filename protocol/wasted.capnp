# The protocol between wasted and its clients (compute clients and wastectl):
# Cap'n Proto RPC over a Unix socket, with file descriptors passed alongside
# messages (SCM_RIGHTS).
#
# A client bootstraps the Daemon capability and calls attach with its
# protocol version. The daemon answers with a Session, the model's
# description and four shared-memory segments, each a capability whose file
# descriptor travels with the answer (Capability::Client::getFd). From then
# on a cache hit costs no call: the client finds and pins a ready slot in the
# slot table (shm/table.h). Hints are fire and forget: the client never waits
# for their answers. When the connection ends for any reason the client's
# pins and pin page are released.
#
# Compatibility: a new field or method is added at the end and keeps the
# version; anything else bumps protocolVersion. A daemon refuses an attach
# whose version differs from its own, naming both.

@0x8a0e69d55616bddf;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("waste::proto");

const protocolVersion :UInt32 = 2;  # 2: the status structs carry their counters as lists

enum HintKind {
  demand @0;     # needed now
  lookahead @1;  # predicted for a coming layer
  warm @2;       # background warm-up, lowest priority
}

struct ClientInfo {
  pid @0 :UInt32;      # informational; the daemon trusts SO_PEERCRED instead
  command @1 :Text;    # the client's command line, for wastectl
}

struct ModelDescription {
  container @0 :Text;    # the container directory the daemon serves (absolute)
  fingerprint @1 :Text;  # of its manifest: a client checks it opened the same one
  arch @2 :Text;
  layers @3 :UInt32;
  experts @4 :UInt32;
  topK @5 :UInt32;
  recordBytes @6 :UInt64;
  slots @7 :UInt32;       # expert cache slots
  slotStride @8 :UInt64;  # bytes from one slot to the next in the cache segment
}

# A shared-memory segment. Its server hands out a read-only file descriptor
# (except for the client's own pin page, which the client writes). A prompt
# state travels the same way: the publisher's memfd, and the daemon's state
# file, read-only, in the answer to findState.
interface Segment {
  size @0 () -> (bytes :UInt64);
}

struct Segments {
  trunk @0 :Segment;   # the packed trunk (engine/format/trunk_pack.h), sealed
  cache @1 :Segment;   # slots of one record each
  table @2 :Segment;   # the slot table (shm/table.h)
  pins @3 :Segment;    # this client's pin page, writable
  trunkBytes @4 :UInt64;
  cacheBytes @5 :UInt64;
  tableBytes @6 :UInt64;
  pinBytes @7 :UInt64;
}

interface Session {
  # Ask for records; answered at once, before any read. Out-of-range layers
  # or experts are refused with a message and the rest of the hint is kept.
  hint @0 (layer :UInt32, experts :List(UInt32), kind :HintKind);
  # Ends the session; the same happens when the connection closes.
  detach @1 ();
  # Fire and forget: the tokens this client has run so far (a running total,
  # so a lost or late message costs nothing), for wastectl clients.
  progress @2 (tokens :UInt64);
}

struct ClientStatus {
  id @0 :UInt32;
  pid @1 :UInt32;
  uid @2 :UInt32;
  command @3 :Text;
  attachedSeconds @4 :Float64;
  counters @5 :List(UInt64);  # protocol/counters.h's client counters (demand hits, late, misses), in its order
  pins @6 :UInt32;     # slots pinned right now
  tokens @7 :UInt64;   # tokens run, as the client reported them (Session.progress)
  commandFromProc @8 :Bool;  # command read by the daemon from /proc; false: the client's own word
}

# One expert's popularity in its layer.
struct ExpertUse {
  expert @0 :UInt32;
  uses @1 :UInt64;    # demand hints for it (saved counts from earlier runs included)
  resident @2 :Bool;  # its record is ready in a slot now
}

# One layer with experts.
struct LayerStatus {
  layer @0 :UInt32;
  counters @1 :List(UInt64);  # protocol/counters.h's layer counters (demand hits, late, misses), in its order
  slotsReady @2 :UInt32;      # slots holding a ready record of this layer
  slotsLoading @3 :UInt32;    # slots being read for it
  resident @4 :Data;          # bit e (byte e / 8, bit e % 8) set: expert e is ready
  hottest @5 :List(ExpertUse);  # the most used experts, most used first (up to 8)
}

struct Status {
  version @0 :Text;        # wasted's version
  pid @1 :UInt32;
  uptimeSeconds @2 :Float64;
  container @3 :Text;
  arch @4 :Text;
  budget @5 :UInt64;       # the ceiling on trunk + cache + overhead
  trunkBytes @6 :UInt64;
  cacheBytes @7 :UInt64;
  overheadBytes @8 :UInt64;
  trunkWired @9 :Bool;     # mlock succeeded
  pageKind @10 :Text;      # which pages back the segments
  slots @11 :UInt32;
  slotsReady @12 :UInt32;
  slotsLoading @13 :UInt32;
  slotsPinned @14 :UInt32;
  slotsFailed @15 :UInt32;
  # Every counter of protocol/counters.h (demand hits, late and misses,
  # reads, lookahead and warm-up counts), in its order: a new counter is
  # appended there and needs no change here.
  counters @16 :List(UInt64);
  queued @17 :List(UInt32);    # waiting reads by priority: demand, lookahead, warm
  inFlight @18 :List(UInt32);  # reads under way by priority
  clients @19 :List(ClientStatus);
  ioDepth @20 :UInt32;
  policy @21 :Text;               # eviction: "lfru" or "lru"
  readBusySeconds @22 :Float64;   # time with at least one read in flight
  layers @23 :List(LayerStatus);  # every layer with experts, in order
  experts @24 :UInt32;            # experts per layer
  recordBytes @25 :UInt64;        # one expert record (one read)
}

# A prompt state the daemon keeps (wastectl states).
struct PromptState {
  tokens @0 :UInt32;        # the prompt's length
  bytes @1 :UInt64;         # its file on disk
  uid @2 :UInt32;           # who published it; only that uid finds it unless states are shared
  ageSeconds @3 :Float64;   # since it was published
  idleSeconds @4 :Float64;  # since it was last published or found
  fingerprint @5 :UInt64;   # the publisher's word for the model's shape
  inMemory @6 :Bool;        # in the memory tier (a sealed memfd), not yet on disk
}

interface Daemon {
  # Version and uid checks happen here; a refusal is an exception whose
  # description says what was wrong.
  attach @0 (client :ClientInfo, version :UInt32)
      -> (session :Session, model :ModelDescription, segments :Segments);
  status @1 (version :UInt32) -> (status :Status);
  # Stops the daemon as SIGTERM would: clients are told, state is saved.
  stop @2 (version :UInt32);
  # Queues warm-up reads of the most used records (by the saved and current
  # use counts) into free slots; answers with how many were queued.
  warm @3 (version :UInt32) -> (queued :UInt32);
  # Empties every slot no client has pinned, in one layer or (layer = -1) all.
  drop @4 (version :UInt32, layer :Int32) -> (dropped :UInt32);
  # Re-reads the daemon's settings (its command line and settings file), as
  # SIGHUP does, and applies those that can change while it runs (log level,
  # allowed uids and group, idle exit, save interval). Answers with what it
  # applied and what changed but needs a restart, one "name: old -> new" each;
  # a file that does not parse is refused and the running settings are kept.
  reload @5 (version :UInt32) -> (applied :List(Text), needRestart :List(Text));

  # Prompt states (daemon/prompt_states.h): a client's session state after a
  # prompt, kept on disk under the state directory and found again by any
  # client of the same uid (every uid with states-shared), across restarts.
  # The daemon treats the state as opaque bytes with its tokens; it checks
  # sizes and its own checksum, the client checks the state's own format.
  # publishState: the first `bytes` bytes of `state`'s file descriptor (a
  # memfd; the client keeps it until the answer) under `tokens` and the
  # client's `fingerprint`. Refused with a message when states are off, too
  # large for their budget, or the bytes cannot be read or written.
  publishState @6 (version :UInt32, tokens :List(Int32), fingerprint :UInt64, state :Segment,
                   bytes :UInt64);
  # The longest state of this uid and fingerprint whose tokens begin `tokens`:
  # `matched` of them (0: none, and no state), its file read-only, its bytes
  # from `offset` on.
  findState @7 (version :UInt32, tokens :List(Int32), fingerprint :UInt64)
      -> (matched :UInt32, state :Segment, offset :UInt64, bytes :UInt64);
  # Every state kept (root and the daemon's uid see all; others their own),
  # and the budgets of the disk tier and of the memory tier.
  listStates @8 (version :UInt32)
      -> (states :List(PromptState), budget :UInt64, memoryBudget :UInt64);
  # Removes the states the caller may see, from both tiers; how many.
  dropStates @9 (version :UInt32) -> (dropped :UInt32);
}

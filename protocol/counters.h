// The status counters of wasted, each declared once, here: the daemon's
// (WASTE_STATUS_COUNTERS), a layer's (WASTE_LAYER_COUNTERS) and a client's
// (WASTE_CLIENT_COUNTERS). From these lists follow the fields of
// DaemonStatus, LayerStatusInfo and ClientStatusInfo (protocol/status.h) and
// of the slot cache's CacheCounters, LayerCounters and ClientCounters
// (daemon/slot_cache.h), the copy from one to the other (daemon/status.cc),
// both conversions (each protocol struct carries its counters as one list,
// `counters`, in the list's order), the Prometheus page (protocol/metrics.cc)
// and wastectl's JSON and text views. Adding a counter is one entry at the end
// of its list and the code that increments it.
//
// Compatibility: the protocol sends the values in this order, so a counter
// is added at the end and never moved or removed (that would bump
// protocolVersion). A client reading an older daemon sees a counter that
// daemon lacks as 0; an older client ignores the values it does not know.
//
// X(member, kind, metric, help, json, label):
//   member  its uint64_t field (in DaemonStatus and CacheCounters, say);
//   kind    "counter" (only grows; its metric ends in _total) or "gauge";
//   metric  its Prometheus family, with `help` as its HELP line;
//   json    its key in `wastectl status --json` ("group.key" inside an object,
//           in the daemon's list);
//   label   its line in `wastectl status`, at most 10 characters; "" when a
//           line of its own already shows it. In a layer's or a client's
//           list: its column in the layers' or the clients' table.
#pragma once

// Demand hints are each counted once: hits (the record was ready), late
// (asked for earlier, by a lookahead, a warm-up or another client, and still
// queued or being read), misses (nobody had asked: the demand started it).
#define WASTE_STATUS_COUNTERS(X)                                                                   \
  X(hits, "counter", "waste_demand_hits_total",                                                    \
    "Demand hints for records already ready",                                                      \
    "hits", "")                                                                                    \
  X(late, "counter", "waste_demand_late_total",                                                    \
    "Demand hints for records asked for earlier whose read was still queued or under way",         \
    "late", "")                                                                                    \
  X(misses, "counter", "waste_demand_misses_total",                                                \
    "Demand hints for records nobody had asked for (the demand started the read)",                 \
    "misses", "")                                                                                  \
  X(reads, "counter", "waste_reads_total",                                                         \
    "Records read from disk",                                                                      \
    "reads", "")                                                                                   \
  X(bytes_read, "counter", "waste_read_bytes_total",                                               \
    "Bytes read from disk",                                                                        \
    "bytes_read", "")                                                                              \
  X(read_errors, "counter", "waste_read_errors_total",                                             \
    "Record reads that failed",                                                                    \
    "read_errors", "")                                                                             \
  X(lookahead_reads, "counter", "waste_lookahead_reads_total",                                     \
    "Reads started for lookahead hints",                                                           \
    "lookahead.reads", "")                                                                         \
  X(lookahead_used, "counter", "waste_lookahead_used_total",                                       \
    "Lookahead reads whose record was demanded before it was evicted",                             \
    "lookahead.used", "")                                                                          \
  X(lookahead_unused_bytes, "counter", "waste_lookahead_unused_bytes_total",                       \
    "Bytes read for lookahead and evicted unused",                                                 \
    "lookahead.unused_bytes", "")                                                                  \
  X(lookahead_dropped, "counter", "waste_lookahead_dropped_total",                                 \
    "Lookahead reads dropped before they started (their layer had passed)",                        \
    "lookahead.dropped", "")                                                                       \
  X(demand_hinted, "counter", "waste_demand_lookahead_hinted_total",                               \
    "Demand hints for records a lookahead hint named first (recall's numerator)",                  \
    "lookahead.demand_hinted", "")                                                                 \
  X(warm_reads, "counter", "waste_warm_reads_total",                                               \
    "Reads started for warm-up",                                                                   \
    "warm_reads", "")

// A layer's demand hints, counted as the daemon's are.
#define WASTE_LAYER_COUNTERS(X)                                                                    \
  X(hits, "counter", "waste_layer_demand_hits_total",                                              \
    "Demand hints for records already ready, by layer",                                            \
    "hits", "hits")                                                                                \
  X(late, "counter", "waste_layer_demand_late_total",                                              \
    "Demand hints for records asked for earlier and not ready yet, by layer",                      \
    "late", "late")                                                                                \
  X(misses, "counter", "waste_layer_demand_misses_total",                                          \
    "Demand hints for records nobody had asked for, by layer",                                     \
    "misses", "misses")

// A client's demand hints, counted as the daemon's are.
#define WASTE_CLIENT_COUNTERS(X)                                                                   \
  X(hits, "counter", "waste_client_demand_hits_total",                                             \
    "Demand hits, by client",                                                                      \
    "hits", "hits")                                                                                \
  X(late, "counter", "waste_client_demand_late_total",                                             \
    "Demand hints whose read was asked for earlier and still under way, by client",                \
    "late", "late")                                                                                \
  X(misses, "counter", "waste_client_demand_misses_total",                                         \
    "Demand misses, by client",                                                                    \
    "misses", "misses")

// Declares one uint64_t field per counter, each 0: inside a struct,
// `WASTE_STATUS_COUNTERS(WASTE_COUNTER_FIELD)`.
#define WASTE_COUNTER_FIELD(member, ...) uint64_t member = 0;

// wasted's memory plan: engine/plan's DaemonPlan (the one rule, which
// `waste plan` shows too) with this machine's shared-memory costs.
#pragma once

#include "engine/plan/plan.h"

namespace waste::daemon {

// `huge_pages`: as --no-huge-pages leaves it; the segments are then sized
// in whole huge pages where the system gives them (shm::Segment::SizeFor),
// and so is the floor.
DaemonPlan PlanFor(const Manifest& m, bool huge_pages);

// DaemonBudget on this machine: its memory limit, less what the other
// wasted processes running now hold (protocol/running_daemons.h). Logs the
// others, and warns when an explicit budget and theirs exceed the limit.
// `limit` receives the limit used.
Result<uint64_t> BudgetOnThisMachine(const DaemonPlan& plan, uint64_t requested,
                                     MemoryLimit* limit);

}  // namespace waste::daemon

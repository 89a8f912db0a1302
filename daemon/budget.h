// wasted's memory plan: engine/plan's DaemonPlan (the one rule, which
// `waste plan` shows too) with this machine's shared-memory costs.
#pragma once

#include "engine/plan/plan.h"

namespace waste::daemon {

// `huge_pages`: as --no-huge-pages leaves it; the segments are then sized
// in whole huge pages where the system gives them (shm::Segment::SizeFor),
// and so is the floor.
DaemonPlan PlanFor(const Manifest& m, bool huge_pages);

}  // namespace waste::daemon

#include "daemon/budget.h"

#include "shm/segment.h"
#include "shm/table.h"

namespace waste::daemon {

DaemonPlan PlanFor(const Manifest& m, bool huge_pages) {
  return PlanDaemon(m, {[huge_pages](uint64_t n) { return shm::Segment::SizeFor(n, huge_pages); },
                        shm::SlotTable::BytesFor, sizeof(shm::PinPage)});
}

}  // namespace waste::daemon

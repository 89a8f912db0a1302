#include "daemon/budget.h"

#include <spdlog/spdlog.h>

#include "protocol/running_daemons.h"
#include "shm/segment.h"
#include "shm/table.h"

namespace waste::daemon {

DaemonPlan PlanFor(const Manifest& m, bool huge_pages) {
  return PlanDaemon(m, {[huge_pages](uint64_t n) { return shm::Segment::SizeFor(n, huge_pages); },
                        shm::SlotTable::BytesFor, sizeof(shm::PinPage)});
}

Result<uint64_t> BudgetOnThisMachine(const DaemonPlan& plan, uint64_t requested,
                                     MemoryLimit* limit) {
  *limit = ProcessMemoryLimit();
  OtherDaemons others;
  // One line each (a journal reads a priority at the start of every line).
  for (const RunningDaemon& d : RunningDaemons()) {
    others.bytes += d.resident_bytes;
    others.names += (others.names.empty() ? "" : "; ") + Describe(d);
  }
  if (others.bytes > 0)
    spdlog::info("other daemons on this machine hold {}: {}", FormatSize(others.bytes),
                 others.names);
  auto budget = DaemonBudget(plan, requested, *limit, others);
  if (budget.ok() && requested && requested + others.bytes > limit->bytes)
    spdlog::warn("--budget {} and the other daemons' {} exceed the {} this process may use: "
                 "the machine may swap",
                 FormatSize(requested), FormatSize(others.bytes), FormatSize(limit->bytes));
  return budget;
}

}  // namespace waste::daemon

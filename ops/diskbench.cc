// waste-diskbench: random O_DIRECT reads of whole expert records from a
// container's banks, at several numbers of reads in flight, to choose the
// reader count from this disk rather than from folklore.
//
//   waste-diskbench CONTAINER [--depths 1,2,4,8,16] [--seconds 5]
//
// Each depth runs that many threads, each reading random records (a whole
// record per pread, as the expert cache does) for the given time.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/format/container.h"
#include "engine/memory/region.h"
#include "waste/version.h"

int main(int argc, char** argv) {
  CLI::App app{"waste-diskbench: expert record read throughput by reads in flight"};
  app.set_version_flag("--version", "waste-diskbench " WASTE_VERSION);
  std::string dir, depths_text = "1,2,4,8,16";
  double seconds = 5;
  app.add_option("CONTAINER", dir, "Container directory")->required();
  app.add_option("--depths", depths_text, "Reads in flight to try")->capture_default_str();
  app.add_option("--seconds", seconds, "Time per depth")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto ct = waste::Container::Open(dir);
  if (!ct.ok()) {
    std::fprintf(stderr, "waste-diskbench: %s\n", ct.status().message().c_str());
    return 1;
  }
  const auto& banks = ct->manifest().banks;
  if (banks.empty()) {
    std::fprintf(stderr, "waste-diskbench: the container has no expert banks\n");
    return 1;
  }
  std::vector<int> fds;
  for (const auto& b : banks) {
    const int fd = open((dir + "/" + b.file).c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
      std::fprintf(stderr, "waste-diskbench: %s: O_DIRECT open failed\n", b.file.c_str());
      return 1;
    }
    fds.push_back(fd);
  }
  const size_t rec = ct->record_bytes();
  const int experts = ct->config().n_experts;
  std::vector<int> depths;
  std::stringstream ss(depths_text);
  for (std::string item; std::getline(ss, item, ',');)
    depths.push_back(std::max(1, std::atoi(item.c_str())));
  // A new sequence every run: the same offsets twice would be served from
  // whatever cache sits below O_DIRECT (a virtual disk's host has one).
  const uint64_t seed = std::random_device{}();
  std::printf("record %zu bytes, %zu banks, %.1f s per depth\n", rec, banks.size(), seconds);
  std::printf("%8s %12s %12s\n", "depth", "GB/s", "reads/s");
  for (int depth : depths) {
    auto buffers = waste::Region::Allocate(rec * static_cast<size_t>(depth));
    if (!buffers.ok()) return 1;
    std::atomic<uint64_t> reads{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < depth; ++t)
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
        uint8_t* buf = buffers->data() + rec * static_cast<size_t>(t);
        while (!stop.load(std::memory_order_relaxed)) {
          const int fd = fds[rng() % fds.size()];
          const uint64_t off = rec * (rng() % static_cast<uint64_t>(experts));
          if (pread(fd, buf, rec, static_cast<off_t>(off)) == static_cast<ssize_t>(rec)) ++reads;
        }
      });
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& th : threads) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%8d %12.2f %12.0f\n", depth, static_cast<double>(reads) * rec / s / 1e9,
                reads / s);
  }
  for (int fd : fds) close(fd);
  return 0;
}

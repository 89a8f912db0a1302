// The loop thread: the mailbox through which other threads reach it, the
// reads it starts, the calls of the RPC thread, the timers, stop and Run.
#include <algorithm>
#include <csignal>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/daemon.h"

namespace waste::daemon {

void Daemon::Post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mail_mu_);
  if (mail_closed_) return;
  mail_.push_back(std::move(fn));
  uv_async_send(&mail_async_);  // coalesced: one wake-up may carry many
}

void Daemon::DrainMailbox() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(mail_mu_);
    batch.swap(mail_);
  }
  for (auto& fn : batch) fn();
  Pump();
}

void Daemon::Pump() {
  if (stopping_) return;
  const uint32_t depth = static_cast<uint32_t>(readers_->threads());
  const uint32_t busy = cache_->in_flight();
  // A demand read starts even while other reads hold every reader (its
  // pieces are read first: readers.h), up to one a reader.
  const uint32_t demands = cache_->in_flight(HintKind::kDemand);
  const uint32_t room = busy < depth ? depth - busy : 0;
  const uint32_t demand_room = demands < depth ? depth - demands : 0;
  if ((room == 0 && demand_room == 0) || !cache_->has_queued()) return;
  const std::vector<ReadJob> jobs = cache_->Dispatch(room, demand_room);
  if (busy == 0 && !jobs.empty()) busy_since_ = Clock::now();
  for (const ReadJob& job : jobs) readers_->Submit(job);
}

void Daemon::AddClient(ClientRecord client) {
  Post([this, c = std::move(client)]() mutable {
    const uint32_t id = c.id;
    cache_->AddClient(id, reinterpret_cast<const shm::PinPage*>(c.pins->mapping.data()));
    clients_[id] = LiveClient{std::move(c), Clock::now()};
    NotifyManager(ManagerStatus());
  });
}

void Daemon::RemoveClient(uint32_t id) {
  Post([this, id] {
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    const ClientCounters cc = cache_->client_counters(id);
    spdlog::info("client {} detached (pid {} uid {}, attached {:.1f} s): {} hits, {} late, {} misses, {} "
                 "pins released",
                 id, it->second.record.pid, it->second.record.uid, MsSince(it->second.since) / 1000,
                 cc.hits, cc.late, cc.misses, cc.pins);
    cache_->RemoveClient(id);  // before the page's mapping can go
    clients_.erase(it);
    last_client_ = Clock::now();
    NotifyManager(ManagerStatus());
  });
}

void Daemon::Hint(uint32_t id, int layer, std::vector<uint32_t> experts, HintKind kind) {
  Post([this, id, layer, e = std::move(experts), kind] {
    if (cache_->Hint(id, layer, e, kind) == 0) return;
    auto it = clients_.find(id);
    if (it == clients_.end() || it->second.cap_logged) return;
    it->second.cap_logged = true;  // once per client, not once per hint
    spdlog::warn("client {} (pid {}): {} reads queued, its cap; hints beyond it are dropped "
                 "until its reads start",
                 id, it->second.record.pid, opt_.max_queued_per_client);
  });
}

void Daemon::Progress(uint32_t id, uint64_t tokens) {
  Post([this, id, tokens] {
    auto it = clients_.find(id);
    if (it != clients_.end()) it->second.tokens = std::max(it->second.tokens, tokens);
  });
}

void Daemon::GetStatus(std::function<void(DaemonStatus)> reply) {
  Post([this, reply = std::move(reply)] { reply(Snapshot()); });
}

void Daemon::Warm(std::function<void(uint32_t)> reply) {
  Post([this, reply = std::move(reply)] {
    const uint32_t n = cache_->Warm(cache_->Hottest(served_.slots));
    spdlog::info("warm-up asked for: {} reads queued", n);
    reply(n);
  });
}

void Daemon::Drop(int layer, std::function<void(uint32_t)> reply) {
  Post([this, layer, reply = std::move(reply)] {
    const uint32_t n = cache_->Drop(layer);
    spdlog::info("dropped {} slots ({})", n, layer < 0 ? "all layers" : "layer " + std::to_string(layer));
    reply(n);
  });
}

void Daemon::Reload(std::string who, std::function<void(Result<ReloadOutcome>)> reply) {
  Post([this, who = std::move(who), reply = std::move(reply)] { reply(ReloadSettings(who)); });
}


void Daemon::StartTimers() {
  uv_timer_stop(&idle_timer_);
  if (opt_.idle_exit_seconds > 0) {
    uv_timer_start(
        &idle_timer_,
        [](uv_timer_t* t) {
          auto* d = static_cast<Daemon*>(t->loop->data);
          if (d->clients_.empty() && MsSince(d->last_client_) / 1000 >= d->opt_.idle_exit_seconds)
            d->Stop("no clients for " + SecondsText(d->opt_.idle_exit_seconds) + " s");
        },
        1000, 1000);
  }
  uv_timer_stop(&save_timer_);
  if (opt_.save_interval_seconds > 0 && !opt_.state_dir.empty()) {
    const auto every = static_cast<uint64_t>(opt_.save_interval_seconds * 1000);
    uv_timer_start(
        &save_timer_, [](uv_timer_t* t) { static_cast<Daemon*>(t->loop->data)->SaveUses(); },
        every, every);
  }
}

void Daemon::RequestStop(std::string why) {
  Post([this, why = std::move(why)] { Stop(why); });
}

void Daemon::Stop(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  spdlog::info("stopping: {}", why);
  NotifyManager("STOPPING=1\nSTATUS=stopping: " + why);
  // From here a second SIGTERM or SIGINT ends the process at once.
  uv_signal_stop(&sigterm_);
  uv_signal_stop(&sigint_);
  uv_signal_stop(&sighup_);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  cache_->Shutdown();  // clients waiting on a slot wake and see it
  rpc_.reset();        // connections close: clients see the daemon go
  if (metrics_) metrics_->Close();
  readers_.reset();    // reads under way finish; their results are dropped
  SaveUses();
  if (states_) states_->SpillToDisk();  // the RPC thread, their only other user, is gone
  {
    std::lock_guard<std::mutex> lock(mail_mu_);
    mail_closed_ = true;
    mail_.clear();
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&mail_async_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sigterm_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sigint_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sighup_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&idle_timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&save_timer_), nullptr);
}

int Daemon::Run() {
  uv_loop_init(&loop_);
  loop_.data = this;
  uv_async_init(&loop_, &mail_async_, [](uv_async_t* a) {
    static_cast<Daemon*>(a->loop->data)->DrainMailbox();
  });
  auto on_signal = [](uv_signal_t* h, int signum) {
    static_cast<Daemon*>(h->loop->data)->Stop(std::string("signal ") + strsignal(signum));
  };
  uv_signal_init(&loop_, &sigterm_);
  uv_signal_start(&sigterm_, on_signal, SIGTERM);
  uv_signal_init(&loop_, &sigint_);
  uv_signal_start(&sigint_, on_signal, SIGINT);
  uv_signal_init(&loop_, &sighup_);
  uv_signal_start(
      &sighup_,
      [](uv_signal_t* h, int) {
        auto* d = static_cast<Daemon*>(h->loop->data);
        if (!d->stopping_) (void)d->ReloadSettings("SIGHUP");  // it logs what it did
      },
      SIGHUP);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error, not a death

  readers_ = std::make_unique<Readers>(
      *ct_, opt_.io_depth, opt_.verify_crc,
      [this](uint32_t slot) { return cache_map_.data() + served_.slot_stride * slot; },
      [this](ReadResult r) {
        Post([this, r = std::move(r)] {
          if (r.error != ReadError::kNone) spdlog::error("read failed: {}", r.message);
          cache_->Complete(r.job, r.error, r.detail);
          if (cache_->in_flight() == 0) busy_seconds_ += MsSince(busy_since_) / 1000;
        });
      });
  if (Status st = readers_->Open(); !st.ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  RaiseDescriptorLimit(opt_.max_clients);
  auto rpc = RpcServer::Start(listen_fd_, served_, opt_.access, opt_.max_clients, this,
                              states_.get());
  if (!rpc.ok()) {
    spdlog::error("{}", rpc.status().message());
    return 1;
  }
  rpc_ = std::move(*rpc);
  if (metrics_) {
    // The live access policy: a reload's allow-uid and allow-group apply here too.
    if (Status st = metrics_->Start(
            &loop_, [this] { return MetricsPage(); },
            [this](uid_t uid) {
              return opt_.access.Allows(uid)
                         ? std::string()
                         : "uid " + std::to_string(uid) +
                               " may not read this wasted's metrics (root, its own uid and the "
                               "uids or group allowed to attach may)";
            },
            opt_.metrics_timeout_seconds);
        !st.ok()) {
      spdlog::error("{}", st.message());
      return 1;
    }
  }

  last_client_ = Clock::now();
  uv_timer_init(&loop_, &idle_timer_);
  uv_timer_init(&loop_, &save_timer_);
  StartTimers();
  LoadUses();
  Pump();
  spdlog::info("serving {} on {} ({} reads in flight, {} eviction), ready in {:.0f} ms",
               ct_->dir(), opt_.socket, opt_.io_depth,
               opt_.policy == EvictionPolicy::kLru ? "LRU" : "LFRU", MsSince(started_));
  NotifyManager("READY=1\n" + ManagerStatus());
  uv_run(&loop_, UV_RUN_DEFAULT);
  uv_loop_close(&loop_);
  spdlog::info("stopped");
  return 0;
}

}  // namespace waste::daemon

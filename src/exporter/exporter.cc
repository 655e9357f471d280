// Implements the exporter's runtime: following the engine, keeping the view, serving scrapes.
#include "exporter/exporter.h"

#include "common/files.h"
#include "common/gzip.h"
#include "common/prometheus_text.h"
#include "common/status.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "pidmap/pod_cgroup.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

absl::StatusOr<Counters> LoadCounters(const std::string& path) {
  if (path.empty()) return ParseCounters(DefaultCountersCsv(), "default counters");
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseCounters(*text, path);
}

constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

absl::StatusOr<std::unique_ptr<Exporter>> Exporter::Start(ExporterOptions options,
                                                          std::unique_ptr<EngineClient> client) {
  if (options.kubernetes && options.virtual_gpus) {
    // Processes looked up in a container's own /proc would be absent or someone else's.
    if (absl::Status host = pidmap::CheckHostProcRoot(options.proc_root); !host.ok()) {
      return WithContext(host, "--kubernetes-virtual-gpus");
    }
  }
  auto counters = LoadCounters(options.collectors_path);
  if (!counters.ok()) return counters.status();
  for (const std::string& warning : counters->warnings) spdlog::warn("{}", warning);
  std::unique_ptr<Exporter> exporter(
      new Exporter(std::move(options), std::move(client), std::move(*counters)));
  Exporter* self = exporter.get();
  self->http_.Get("/metrics", [self](const HttpRequest& request) {
    const absl::Time started = absl::Now();
    HttpResponse response{.content_type = kMetricsType, .vary_accept_encoding = true};
    if (self->process_ != nullptr) {
      // The process's series come last, as dcgm-exporter appends them. A gzip scrape is
      // compressed whole (one gzip member, which every client reads) at each scrape.
      std::string own;
      self->process_->Append(&own);
      if (request.accepts_gzip) {
        response.body = Gzip(self->ScrapeText() + own, 1);
        response.content_encoding = "gzip";
      } else {
        self->ScrapeFile(&response);
        response.body = std::move(own);
      }
    } else {
      if (request.accepts_gzip) response.shared_body = self->ScrapeGzip();
      if (response.shared_body != nullptr) {
        response.content_encoding = "gzip";
      } else {
        self->ScrapeFile(&response);
      }
    }
    self->last_scrape_ns_.store(absl::ToInt64Nanoseconds(absl::Now() - started));
    return response;
  });
  self->http_.Get("/healthz", [] { return HttpResponse{.body = "ok\n"}; });
  self->http_.Get("/readyz", [self] {
    std::string why;
    const bool ready = self->Ready(&why);
    return HttpResponse{.status = ready ? 200 : 503, .body = why + "\n"};
  });
  self->http_.Get("/", [] {
    return HttpResponse{
        .content_type = "text/html; charset=utf-8",
        .body =
            "<html><head><title>Vigil exporter</title></head><body><h1>Vigil exporter</h1>"
            "<p><a href=\"./metrics\">Metrics</a> · <a href=\"./readyz\">Ready</a> · "
            "<a href=\"./healthz\">Alive</a></p></body></html>\n"};
  });
  self->http_.SetGuard(self->options_.http_guard);
  if (absl::Status started = self->http_.Start(self->options_.listen); !started.ok()) {
    return started;
  }
  if (self->pods_ != nullptr) self->pods_->Start();
  if (self->pod_uids_ != nullptr) self->pod_uids_->Start();
  if (self->dra_ != nullptr) self->dra_->Start();
  self->ticks_thread_ = StartNamedThread("vigil-ticks", [self] { self->FollowTicks(); });
  self->events_thread_ = StartNamedThread("vigil-events", [self] { self->FollowEvents(); });
  return exporter;
}

Exporter::Exporter(ExporterOptions options, std::unique_ptr<EngineClient> client, Counters counters)
    : options_(std::move(options)), client_(std::move(client)) {
  if (options_.exporter_metrics) process_ = std::make_unique<procmetrics::ProcessCollector>();
  if (options_.kubernetes) {
    PodMapperOptions pods = options_.pods;
    pods.clock = options_.clock;
    pods_ = std::make_unique<PodMapper>(pods);
    // The per-pod usage of shared GPUs joins processes to pods by UID, as cgroups name them.
    if ((options_.pod_uid || options_.virtual_gpus) && options_.kube != nullptr) {
      pod_uids_ =
          std::make_unique<kube::PodUids>(options_.kube, options_.node_name, options_.clock);
    }
    if (options_.dra && options_.kube != nullptr) {
      dra_ = std::make_unique<DraDevices>(options_.kube.get(),
                                          DraDevicesOptions{.node_name = options_.node_name,
                                                            .driver = options_.dra_driver,
                                                            .clock = options_.clock});
    }
  }
  absl::MutexLock lock(&mutex_);
  counters_ = std::make_shared<const Counters>(std::move(counters));
  view_.engine_down_reason = "not connected to the engine yet";
  RenderLocked();
}

Exporter::~Exporter() { Stop(); }

void Exporter::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    if (stopping_) return;
    stopping_ = true;
    if (ticks_ != nullptr) ticks_->Cancel();
    if (events_ != nullptr) events_->Cancel();
  }
  if (ticks_thread_.joinable()) ticks_thread_.join();
  if (events_thread_.joinable()) events_thread_.join();
  if (pods_ != nullptr) pods_->Stop();
  if (pod_uids_ != nullptr) pod_uids_->Stop();
  if (dra_ != nullptr) dra_->Stop();
  http_.Stop();
}

void Exporter::FollowTicks() {
  bool was_up = false, connected_once = false;
  std::string down_reason;
  while (true) {
    v1::SubscribeRequest request;
    {
      absl::MutexLock lock(&mutex_);
      for (FieldId id : counters_->FieldIds()) request.add_field_ids(id);
      if (counters_->Has(ExporterMetric::kClockEventsCount)) {
        request.add_field_ids(fid::kClocksEventReasons);
      }
    }
    request.set_include_health(true);
    request.set_include_mig_instances(true);
    auto subscription = client_->Subscribe(request);
    {
      absl::MutexLock lock(&mutex_);
      if (stopping_) return;
      ticks_ = subscription.get();
    }
    uint64_t stream_dropped = 0;
    while (true) {
      const TickSubscription::Event event = subscription->Next();
      if (event.kind == TickSubscription::Event::kCancelled) break;
      if (event.kind != TickSubscription::Event::kMessage) {
        const std::string reason(MessageOf(event.error));
        if (was_up || down_reason != reason) {
          spdlog::warn(
              "exporter: {}; serving vigil_engine_up 0 and no GPU series until it is "
              "back",
              reason);
        }
        was_up = false;
        down_reason = reason;
        absl::MutexLock lock(&mutex_);
        view_.engine_up = false;
        view_.engine_down_reason = reason;
        RenderLocked();
        if (event.kind == TickSubscription::Event::kRejected) {
          // A request the engine refuses (an older engine?) will not improve by retrying fast.
          if (options_.clock->AwaitWithTimeout(&mutex_, absl::Condition(&stopping_),
                                               absl::Seconds(5))) {
            ticks_ = nullptr;
            return;
          }
          break;
        }
        continue;
      }
      const v1::TickUpdate& tick = *event.message;
      // A new engine instance (or the first), or a MIG layout change: learn its identity and
      // GPUs (with their instances), outside the lock.
      std::optional<v1::EngineInfo> info;
      std::optional<v1::ListGpusResponse> gpus;
      bool need_identity, render_due;
      {
        absl::MutexLock lock(&mutex_);
        need_identity = event.new_instance || view_.gpus.empty() ||
                        view_.info.instance_id() != tick.instance_id() ||
                        mig_generation_ != tick.mig_generation();
        // Whether this tick is rendered, as ApplyTick will decide it (a tick that needs the
        // identity and does not get it is skipped); a scrape may still find the engine stale in
        // between, which makes it due there too.
        render_due = need_identity || RenderDueLocked(tick, /*new_identity=*/false);
      }
      if (need_identity) {
        auto got_info = client_->GetEngineInfo();
        auto got_gpus = client_->ListGpus();
        if (!got_info.ok() || !got_gpus.ok() || got_info->instance_id() != tick.instance_id() ||
            got_gpus->mig_generation() < tick.mig_generation()) {
          continue;  // the engine is changing under us: take the next tick
        }
        info = std::move(*got_info);
        gpus = std::move(*got_gpus);
        spdlog::info("exporter: following engine {} on node {} ({} GPUs){}", info->instance_id(),
                     info->node_name(), gpus->gpus_size(),
                     connected_once ? " after a reconnect" : "");
      }
      if (connected_once && !was_up) reconnects_.fetch_add(1, std::memory_order_relaxed);
      connected_once = was_up = true;
      down_reason.clear();
      if (tick.dropped_ticks() > stream_dropped) {
        dropped_ticks_.fetch_add(tick.dropped_ticks() - stream_dropped, std::memory_order_relaxed);
        stream_dropped = tick.dropped_ticks();
      }
      // The pods of the GPUs' processes, read from /proc before taking the lock, for a tick
      // that is rendered only (with -c, most are not).
      std::optional<ProcessPods> process_pods;
      if (options_.kubernetes && options_.virtual_gpus && render_due) {
        process_pods = LookUpProcessPodsOf(tick);
      }
      ApplyTick(tick, std::move(info), std::move(gpus), std::move(process_pods));
      CompressLatest();  // outside the lock: scrapes never wait for the compression
    }
    absl::MutexLock lock(&mutex_);
    ticks_ = nullptr;
    if (stopping_) return;
  }
}

void Exporter::ApplyTick(const v1::TickUpdate& tick, std::optional<v1::EngineInfo> info,
                         std::optional<v1::ListGpusResponse> gpus,
                         std::optional<ProcessPods> process_pods) {
  absl::MutexLock lock(&mutex_);
  if (info) {
    const bool new_instance = view_.info.instance_id() != info->instance_id();
    view_.info = std::move(*info);
    view_.gpus.assign(gpus->gpus().begin(), gpus->gpus().end());
    mig_generation_ = gpus->mig_generation();
    stale_after_ =
        std::max(absl::Seconds(3), absl::Microseconds(view_.info.tick_interval_us()) * 3);
    // A new engine instance's clock events start afresh (not a MIG layout change's). (The
    // XID counts are the event thread's: it resets them when it sees the new instance.)
    if (new_instance) clock_events_.clear();
  }
  const bool new_identity = info.has_value();
  const bool render = RenderDueLocked(tick, new_identity);
  view_.tick = tick;
  view_.engine_up = true;
  last_tick_ = options_.clock->Now();
  for (const v1::FieldValue& value : tick.values()) {
    if (value.field_id() == fid::kClocksEventReasons && value.sample_seq() == tick.seq() &&
        value.status() == v1::VALUE_STATUS_OK) {
      clock_events_[value.gpu()].emplace_back(absl::FromUnixMicros(value.timestamp_us()),
                                              value.int_value());
    }
  }
  // The pods go with the tick they were looked up for. A tick rendered without them (one that
  // became due after the lookup was skipped, because a scrape found the engine stale meanwhile,
  // or a SIGHUP's render of the latest tick) serves its usage as not known: never the last
  // lookup's, whose pids may be other processes' by now.
  if (process_pods.has_value()) {
    view_.process_pods = *std::move(process_pods);
  } else if (options_.kubernetes && options_.virtual_gpus) {
    view_.process_pods = UnknownProcessPods(tick.processes());
  }
  if (!render) return;
  rendered_tick_ = absl::FromUnixMicros(tick.timestamp_us());
  RenderLocked();
}

bool Exporter::RenderDueLocked(const v1::TickUpdate& tick, bool new_identity) const {
  // With --collect-interval, the served values change at most that often (in engine time);
  // an engine that comes back, or a new one, is served at once.
  return !view_.engine_up || new_identity ||
         absl::FromUnixMicros(tick.timestamp_us()) - rendered_tick_ >= options_.collect_interval;
}

void Exporter::FollowEvents() {
  v1::WatchEventsRequest request;
  request.set_recent(1000);  // rebuild the XID window after a (re)connect
  auto subscription = client_->WatchEvents(request);
  {
    absl::MutexLock lock(&mutex_);
    if (stopping_) return;
    events_ = subscription.get();
  }
  ReplayedEvents replayed;  // a reconnect replays what was already counted
  while (true) {
    const EventSubscription::Event event = subscription->Next();
    if (event.kind == EventSubscription::Event::kCancelled) break;
    if (event.kind != EventSubscription::Event::kMessage) continue;  // reconnects by itself
    const v1::Event& e = *event.message;
    absl::MutexLock lock(&mutex_);
    const ReplayedEvents::Seen seen = replayed.See(e);
    if (seen.new_instance) {
      xids_.clear();  // the backlog of the new instance is replayed
      view_.sxid_counts.clear();
    }
    if (!seen.fresh) continue;
    if (e.kind() == v1::Event::XID && e.gpu() >= 0) {
      xids_[static_cast<uint32_t>(e.gpu())].emplace_back(absl::FromUnixMicros(e.time_us()),
                                                         e.xid());
    }
    if (e.kind() == v1::Event::SXID && e.has_sxid()) {
      // Rendered with the next tick, as the XID counts are.
      ++view_.sxid_counts[{e.sxid().nvswitch(), e.sxid().pci_bus_id(), e.sxid().code(),
                           e.sxid().fatal()}];
    }
  }
  absl::MutexLock lock(&mutex_);
  events_ = nullptr;
}

ProcessPods Exporter::LookUpProcessPodsOf(const v1::TickUpdate& tick) {
  std::string error;
  ProcessPods pods = LookUpProcessPods(options_.proc_root, tick.processes(), &error);
  if (!pods.untold.empty()) {
    process_lookup_errors_.fetch_add(pods.untold.size(), std::memory_order_relaxed);
  }
  if (!error.empty() && !lookup_failing_) {
    spdlog::warn(
        "exporter: cannot tell the pod of {} GPU process(es) ({}); the per-pod usage of the GPUs "
        "they run on is not served until it can be told",
        pods.untold.size(), error);
  } else if (error.empty() && lookup_failing_) {
    spdlog::info("exporter: the pods of the GPUs' processes can be told again");
  }
  lookup_failing_ = !error.empty();
  return pods;
}

void Exporter::CheckFreshnessLocked() {
  const absl::Time now = options_.clock->Now();
  if (view_.engine_up && now - last_tick_ > stale_after_) {
    view_.engine_up = false;
    view_.engine_down_reason =
        fmt::format("no tick from the engine for {}",
                    absl::FormatDuration(absl::Trunc(now - last_tick_, absl::Milliseconds(1))));
    spdlog::warn("exporter: {}; serving vigil_engine_up 0", view_.engine_down_reason);
    RenderLocked();
  }
}

void Exporter::RenderLocked() {
  const absl::Time started = absl::Now();  // the render's own cost: real time, not the clock
  const absl::Time now = options_.clock->Now();
  view_.xid_counts.clear();
  for (auto& [gpu, entries] : xids_) {
    while (!entries.empty() && entries.front().first < now - options_.xid_window)
      entries.pop_front();
    for (const auto& [time, xid] : entries) ++view_.xid_counts[gpu][xid];
  }
  view_.clock_event_counts.clear();
  for (auto& [gpu, entries] : clock_events_) {
    while (!entries.empty() && entries.front().first < now - options_.clock_events_window) {
      entries.pop_front();
    }
    auto& counts = view_.clock_event_counts[gpu];
    for (const auto& [time, reasons] : entries) {
      for (const auto& [bit, name] : ClockEventNames()) {
        if (reasons & bit) ++counts[name];
      }
    }
  }
  if (pods_ != nullptr) {
    view_.pods.clear();
    GpuPodMap current = pods_->Current();
    if (dra_ != nullptr) {
      // Devices held through ResourceClaims, moved to the GPUs the driver's slices say they are.
      const dra::DeviceMap map = dra_->Map(view_.gpus);
      AttributeDraDevices(
          [&](const DraAllocation& held) {
            return map.UuidOf(held.driver, held.pool, held.device);
          },
          &current);
    }
    if (pod_uids_ != nullptr) {
      for (auto& [device, pods] : current) {
        for (PodInfo& pod : pods) pod.uid = pod_uids_->UidOf(pod.namespace_name, pod.pod);
      }
    }
    view_.pods = std::move(current);
  }
  RenderOptions render{
      .hostname_label = options_.hostname_label,
      .hostname = options_.hostname,
      .xid_window_ms = absl::ToInt64Milliseconds(options_.xid_window),
      .clock_events_window_ms = absl::ToInt64Milliseconds(options_.clock_events_window),
      .gpu_id_type = options_.gpu_id_type,
      .old_namespace = options_.old_namespace,
      .pod_uid = options_.kubernetes && options_.pod_uid,
      .virtual_gpus = options_.kubernetes && options_.virtual_gpus};
  body_ = std::make_shared<const std::string>(RenderMetrics(*counters_, view_, render));
  // The same bytes in a memory file, for sendfile; without one (out of descriptors) scrapes send
  // the string.
  auto file = SharedFile::Create(*body_);
  body_file_ = file.ok() ? *std::move(file) : nullptr;
  tail_ = std::make_shared<const std::string>(ProcessMetrics());
  last_render_ns_.store(absl::ToInt64Nanoseconds(absl::Now() - started));
}

void Exporter::ScrapeFile(HttpResponse* response) {
  scrapes_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mutex_);
  CheckFreshnessLocked();
  // The exporter's own metrics first (the order of metric families is free): the headers and
  // they go out in one write, then the body from its memory file (or, without one, the string).
  response->shared_prefix = tail_;
  if (body_file_ != nullptr) {
    response->file_body = body_file_;
  } else {
    response->shared_body = body_;
  }
}

std::string Exporter::ScrapeText() {
  scrapes_.fetch_add(1, std::memory_order_relaxed);
  gzip_scrapes_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mutex_);
  CheckFreshnessLocked();
  std::string text = tail_ != nullptr ? *tail_ : "";
  if (body_ != nullptr) text += *body_;
  return text;
}

std::shared_ptr<const std::string> Exporter::ScrapeGzip() {
  absl::MutexLock lock(&mutex_);
  CheckFreshnessLocked();
  if (gzip_source_ == nullptr || gzip_source_ != body_) return nullptr;
  scrapes_.fetch_add(1, std::memory_order_relaxed);
  gzip_scrapes_.fetch_add(1, std::memory_order_relaxed);
  return gzip_body_;
}

void Exporter::CompressLatest() {
  std::shared_ptr<const std::string> body, tail;
  {
    absl::MutexLock lock(&mutex_);
    if (body_ == nullptr || gzip_source_ == body_) return;
    body = body_;
    tail = tail_;
  }
  // The same text a plain scrape gets. Level 1: most of the size gone (the text repeats its
  // labels) for a fraction of the time.
  auto compressed = std::make_shared<const std::string>(Gzip(*tail + *body, 1));
  absl::MutexLock lock(&mutex_);
  if (body_ != body) return;  // rendered again meanwhile: that render gets compressed next
  gzip_body_ = std::move(compressed);
  gzip_source_ = std::move(body);
}

bool Exporter::Ready(std::string* why) {
  absl::MutexLock lock(&mutex_);
  CheckFreshnessLocked();
  if (!view_.engine_up) {
    *why = "not ready: " + view_.engine_down_reason;
    return false;
  }
  *why = fmt::format("ready: engine {} on node {}, seq {}", view_.tick.instance_id(),
                     view_.info.node_name(), view_.tick.seq());
  return true;
}

absl::Status Exporter::ReloadCounters() {
  auto counters = LoadCounters(options_.collectors_path);
  if (!counters.ok()) {
    reloads_failed_.fetch_add(1, std::memory_order_relaxed);
    {
      absl::MutexLock lock(&mutex_);
      tail_ = std::make_shared<const std::string>(ProcessMetrics());  // served from now on
    }
    spdlog::error("SIGHUP: {}; keeping the previous counters", MessageOf(counters.status()));
    return counters.status();
  }
  spdlog::info("SIGHUP: reloaded {}", options_.collectors_path.empty() ? "the default counters"
                                                                       : options_.collectors_path);
  for (const std::string& warning : counters->warnings) spdlog::warn("{}", warning);
  absl::MutexLock lock(&mutex_);
  counters_ = std::make_shared<const Counters>(std::move(*counters));
  if (ticks_ != nullptr) ticks_->Cancel();  // resubscribes with the new fields
  RenderLocked();  // the old tick under the new counters: no empty scrape in between
  return absl::OkStatus();
}

std::string Exporter::ProcessMetrics() {
  std::string out;
  out.reserve(1536);
  PrometheusText text(&out);
  text.Single("vigil_exporter_scrapes_total", MetricType::kCounter, "Scrapes of /metrics served.",
              scrapes_.load());
  text.Single(
      "vigil_exporter_gzip_scrapes_total", MetricType::kCounter,
      "Scrapes of /metrics answered gzip-compressed (the scraper accepted it and the latest "
      "render was compressed).",
      gzip_scrapes_.load());
  text.Single("vigil_exporter_scrape_duration_seconds", MetricType::kGauge,
              "How long the previous scrape of /metrics took to answer.",
              last_scrape_ns_.load() / 1e9, 6);
  text.Single("vigil_exporter_render_duration_seconds", MetricType::kGauge,
              "How long the last rendering of the GPU series took (once per engine tick).",
              last_render_ns_.load() / 1e9, 6);
  text.Single("vigil_exporter_engine_reconnects_total", MetricType::kCounter,
              "Times the exporter got its engine back after losing it.", reconnects_.load());
  text.Single("vigil_exporter_dropped_ticks_total", MetricType::kCounter,
              "Engine ticks this exporter missed because it read too slowly.",
              dropped_ticks_.load());
  text.Single("vigil_exporter_counters_reload_failures_total", MetricType::kCounter,
              "Reloads of --collectors that failed (the previous counters stayed in use).",
              reloads_failed_.load());
  if (pods_ != nullptr) {
    text.Single("vigil_exporter_pod_mapping_errors_total", MetricType::kCounter,
                "Failed refreshes of pod attribution from the kubelet.", pods_->errors());
  }
  if (options_.virtual_gpus) {
    text.Single("vigil_exporter_process_pod_lookup_errors_total", MetricType::kCounter,
                "GPU processes whose pod could not be told from /proc (their GPU's per-pod usage "
                "was not served), counted per engine tick.",
                process_lookup_errors_.load(std::memory_order_relaxed));
  }
  if (pod_uids_ != nullptr) {
    text.Single("vigil_exporter_pod_uid_errors_total", MetricType::kCounter,
                "Failed lists and watches of this node's pods on the API server (for pod_uid).",
                pod_uids_->errors());
  }
  return out;
}

}  // namespace vigil

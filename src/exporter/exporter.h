// `vigil exporter`: a Prometheus exporter that is a client of the node's engine. It follows the
// engine's ticks (with each tick's health verdict) and events, keeps the latest state in memory
// and renders /metrics once per tick, so a scrape is answered from memory — never a round trip
// to the engine per scrape, never a stale value: when the engine is unreachable or silent for
// longer than three ticks, vigil_engine_up is 0, no GPU series are served, /readyz answers 503,
// and the exporter reconnects by itself (picking up a new engine instance without a restart).
//
// Threads: one follows ticks (and, with --kubernetes-virtual-gpus, reads the pods of the GPUs'
// processes from /proc before it locks), one follows events, one refreshes pod attribution
// (--kubernetes), one follows the node's pods on the API server (--kubernetes-enable-pod-uid,
// --kubernetes-virtual-gpus),
// the HTTP thread (vigil-http) serves scrapes. `mutex_` guards the view and the rendered body;
// rendering happens on the tick thread (or on a scrape that finds the data stale), never while
// holding gRPC calls.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/engine_client.h"
#include "common/clock.h"
#include "common/http_server.h"
#include "dra/dra_devices.h"
#include "exporter/counters.h"
#include "exporter/render.h"
#include "kube/kube_api.h"
#include "kube/pod_uids.h"
#include "podresources/pod_mapper.h"
#include "procmetrics/process_metrics.h"

namespace vigil {

struct ExporterOptions {
  std::string listen = ":9400";
  // The web config in force on --listen (TLS, basic auth, headers); nullptr: plain HTTP. Not
  // owned; outlives the exporter.
  HttpGuard* http_guard = nullptr;
  std::string collectors_path;              // empty: dcgm-exporter's default list
  std::string hostname_label = "Hostname";  // or "hostname"
  std::string hostname;                     // the label's value; empty: no label
  bool kubernetes = false;
  GpuIdType gpu_id_type = GpuIdType::kUid;  // how the kubelet names whole GPUs
  bool old_namespace = false;               // --use-old-namespace (RenderOptions)
  // dcgm-exporter's --collect-interval: the values served change at most this often (a render
  // every engine tick when zero). Freshness (vigil_engine_up) is judged on every tick anyway.
  absl::Duration collect_interval = absl::ZeroDuration();
  PodMapperOptions pods;
  // dcgm-exporter's --kubernetes-enable-pod-uid (with `kubernetes`): pod_uid on pod-attributed
  // series, the UIDs of node `node_name`'s pods read from the API server `kube`.
  bool pod_uid = false;
  // dcgm-exporter's --kubernetes-enable-dra (with `kubernetes`): the devices pods hold through
  // ResourceClaims (the kubelet's dynamic_resources) attributed to the GPUs the driver's
  // ResourceSlices for node `node_name` say they are, with the dra_* labels.
  bool dra = false;
  std::string dra_driver = std::string(dra::kNvidiaGpuDriver);
  std::shared_ptr<kube::KubeApi> kube;
  std::string node_name;
  absl::Duration xid_window = absl::Minutes(5);
  absl::Duration clock_events_window = absl::Minutes(5);
  // The time the exporter judges freshness and windows by, and waits on; not owned.
  Clock* clock = Clock::Real();
  // dcgm-exporter 4.8.4's --enable-exporter-metrics: the process's own process_* series after
  // the others, read at each scrape.
  bool exporter_metrics = false;
  // dcgm-exporter's --kubernetes-virtual-gpus (RenderOptions::virtual_gpus, with `kubernetes`):
  // each GPU process's pod read from `proc_root` (the host's /proc: pidmap::CheckHostProcRoot),
  // the pods' UIDs from the API server `kube` as with pod_uid.
  bool virtual_gpus = false;
  std::string proc_root = "/proc";
};

class Exporter {
 public:
  // `client` (owned) reaches the engine. Starts following and serving.
  static absl::StatusOr<std::unique_ptr<Exporter>> Start(ExporterOptions options,
                                                         std::unique_ptr<EngineClient> client);
  ~Exporter();

  int port() const { return http_.port(); }
  // Re-reads --collectors (SIGHUP) and logs the outcome. On error the old counters stay and the
  // error is returned; scrapes keep being answered from the last good render meanwhile.
  absl::Status ReloadCounters();
  void Stop();

  // The /metrics answer without gzip: the exporter's own metrics as of the last render, then the
  // body rendered at the last tick, from its memory file (sendfile) or, without one, the string.
  void ScrapeFile(HttpResponse* response);
  // The same text compressed with gzip, for a scraper that accepts it; null while the last
  // render is not compressed yet (answer plain then).
  std::shared_ptr<const std::string> ScrapeGzip();
  bool Ready(std::string* why);

 private:
  Exporter(ExporterOptions options, std::unique_ptr<EngineClient> client, Counters counters);
  void FollowTicks();
  void FollowEvents();
  // Takes `tick` (with the engine's identity and GPUs when they were fetched anew, and the pods
  // of its processes when they were looked up) into the view and renders when due.
  void ApplyTick(const v1::TickUpdate& tick, std::optional<v1::EngineInfo> info,
                 std::optional<v1::ListGpusResponse> gpus, std::optional<ProcessPods> process_pods)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Whether `tick` is to be rendered: the engine was down, it is new, or --collect-interval has
  // passed in engine time since the last render.
  bool RenderDueLocked(const v1::TickUpdate& tick, bool new_identity) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Rebuilds the rendered body from the view (caller holds mutex_).
  void RenderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Compresses the latest render for gzip scrapes, outside the lock (a scrape never waits for
  // it): called by the threads that render, after they let go of the lock.
  void CompressLatest() ABSL_LOCKS_EXCLUDED(mutex_);
  // The text of a plain scrape (own metrics, then the body), copied; for a gzip scrape that
  // adds the process's series to it.
  std::string ScrapeText() ABSL_LOCKS_EXCLUDED(mutex_);
  // Marks the engine down if no tick arrived for too long (caller holds mutex_).
  void CheckFreshnessLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::string ProcessMetrics();
  // The pods of the processes in `tick` (--kubernetes-virtual-gpus), counting and logging once
  // per failure streak those that cannot be told. Reads /proc: on the tick thread, unlocked.
  ProcessPods LookUpProcessPodsOf(const v1::TickUpdate& tick) ABSL_LOCKS_EXCLUDED(mutex_);

  const ExporterOptions options_;
  std::unique_ptr<EngineClient> client_;
  std::unique_ptr<PodMapper> pods_;
  std::unique_ptr<kube::PodUids> pod_uids_;  // with options_.pod_uid
  std::unique_ptr<DraDevices> dra_;          // with options_.dra
  HttpServer http_;
  std::thread ticks_thread_, events_thread_;

  // Set when options_.exporter_metrics; used on the HTTP thread.
  std::unique_ptr<procmetrics::ProcessCollector> process_;
  std::atomic<uint64_t> scrapes_{0}, gzip_scrapes_{0}, reconnects_{0}, dropped_ticks_{0},
      reloads_failed_{0};
  std::atomic<int64_t> last_scrape_ns_{0}, last_render_ns_{0};
  std::atomic<uint64_t> process_lookup_errors_{0};
  bool lookup_failing_ = false;  // the tick thread's: log once per failure streak

  absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::shared_ptr<const Counters> counters_ ABSL_GUARDED_BY(mutex_);
  TickSubscription* ticks_ ABSL_GUARDED_BY(mutex_) = nullptr;
  EventSubscription* events_ ABSL_GUARDED_BY(mutex_) = nullptr;
  ExporterView view_ ABSL_GUARDED_BY(mutex_);
  uint64_t mig_generation_ ABSL_GUARDED_BY(mutex_) = 0;  // of view_.gpus' MIG instances
  // The engine time of the tick last rendered (for collect_interval).
  absl::Time rendered_tick_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  absl::Time last_tick_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  absl::Duration stale_after_ ABSL_GUARDED_BY(mutex_) = absl::Seconds(3);
  // Per GPU: (time, XID) within the XID window; (time, reasons bitmask) within the clock window.
  std::map<uint32_t, std::deque<std::pair<absl::Time, uint32_t>>> xids_ ABSL_GUARDED_BY(mutex_);
  std::map<uint32_t, std::deque<std::pair<absl::Time, int64_t>>> clock_events_
      ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const std::string> body_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const SharedFile> body_file_ ABSL_GUARDED_BY(mutex_);  // body_'s bytes, or null
  std::shared_ptr<const std::string> tail_ ABSL_GUARDED_BY(mutex_);  // own metrics at the render
  // body_ (with the exporter's own metrics as of then) gzip-compressed, once per render, for the
  // scrapers that accept gzip; gzip_source_ is the body_ it was made from (a newer body_ not yet
  // compressed is served plain).
  std::shared_ptr<const std::string> gzip_body_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const std::string> gzip_source_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil

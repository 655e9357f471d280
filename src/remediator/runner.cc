// Implements one remediator replica: the Lease, the passes and the endpoints (runner.h).
#include "remediator/runner.h"

#include "common/prometheus_text.h"
#include "common/status.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace vigil::remediator {
namespace {

constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

Runner::Runner(RunnerOptions options, std::unique_ptr<kube::KubeApi> api)
    : options_(std::move(options)),
      api_(std::move(api)),
      remediator_(std::make_unique<Remediator>(options_.remediator, api_.get())),
      lease_(api_.get(), options_.remediator.clock, options_.lease) {
  if (options_.exporter_metrics) process_ = std::make_unique<procmetrics::ProcessCollector>();
}

absl::StatusOr<std::unique_ptr<Runner>> Runner::Start(RunnerOptions options,
                                                      std::unique_ptr<kube::KubeApi> api) {
  std::unique_ptr<Runner> runner(new Runner(std::move(options), std::move(api)));
  Runner* self = runner.get();
  self->http_.Get("/healthz", [] { return HttpResponse{.body = "ok\n"}; });
  self->http_.Get("/readyz", [self] {
    const bool synced = self->remediator_->synced();
    return HttpResponse{.status = synced ? 200 : 503,
                        .body = synced ? "ready\n" : "the GPU nodes are not listed yet\n"};
  });
  self->http_.Get("/status", [self] {
    nlohmann::json status = self->remediator_->StatusJson();
    status["identity"] = self->options_.lease.identity;
    status["leading"] = self->leading_.load();
    status["lease"] = self->options_.lease.ns + "/" + self->options_.lease.name;
    return HttpResponse{.content_type = "application/json", .body = status.dump(2) + "\n"};
  });
  self->http_.Get("/metrics", [self] {
    HttpResponse response{.content_type = kMetricsType, .body = self->Metrics()};
    if (self->process_ != nullptr) self->process_->Append(&response.body);
    return response;
  });
  self->http_.SetGuard(self->options_.http_guard);
  if (absl::Status started = self->http_.Start(self->options_.listen); !started.ok()) {
    return started;
  }
  self->remediator_->StartWatching();
  self->thread_ = StartNamedThread("vigil-remediate", [self] { self->Loop(); });
  return runner;
}

Runner::~Runner() { Stop(); }

void Runner::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  remediator_->Stop();
  http_.Stop();
}

void Runner::Loop() {
  Clock* const clock = options_.remediator.clock;
  std::string last_error;
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      if (stopping_) break;
    }
    const absl::Time asked = clock->Now();
    auto held = lease_.TryAcquireOrRenew();
    const bool leading = held.ok() && *held;
    if (!held.ok()) {
      ++lease_errors_;
      const std::string error(MessageOf(held.status()));
      if (error != last_error) {
        spdlog::warn("remediator: cannot renew the Lease {}/{}: {}; not acting until it can",
                     options_.lease.ns, options_.lease.name, error);
        last_error = error;
      }
    } else {
      last_error.clear();
    }
    if (leading != leading_.exchange(leading)) {
      if (leading) {
        remediator_->StartedLeading();
        spdlog::info("remediator: {} holds the Lease {}/{}: acting (mode {})",
                     options_.lease.identity, options_.lease.ns, options_.lease.name,
                     ModeName(options_.remediator.mode));
      } else {
        spdlog::info("remediator: {} does not hold the Lease (holder: {}): standing by",
                     options_.lease.identity, lease_.holder().empty() ? "none" : lease_.holder());
      }
    }
    // Acting only well within the Lease just renewed: a pass on a slow API server stops before
    // another replica could take the Lease over.
    if (leading && remediator_->synced()) {
      (void)remediator_->ReconcileOnce(asked + options_.lease.duration / 2);  // logged there
    }
    absl::MutexLock lock(&mutex_);
    clock->AwaitWithTimeout(&mutex_, absl::Condition(&stopping_), options_.pass_every);
  }
  if (leading_.exchange(false)) {
    if (absl::Status released = lease_.Release(); !released.ok()) {
      spdlog::warn(
          "remediator: could not give the Lease up: {}; another replica takes over when "
          "it expires",
          MessageOf(released));
    } else {
      spdlog::info("remediator: gave the Lease up");
    }
  }
}

std::string Runner::Metrics() const {
  std::string out = remediator_->Metrics();
  PrometheusText text(&out);
  text.Single("vigil_remediator_leader", MetricType::kGauge,
              "1 while this replica holds the Lease and acts.", leading_.load() ? 1 : 0);
  text.Single("vigil_remediator_lease_errors_total", MetricType::kCounter,
              "Lease renewals the API server did not answer.", lease_errors_.load());
  text.Single("vigil_remediator_mode", MetricType::kGauge, "The mode: 0 off, 1 dry-run, 2 on.",
              static_cast<int>(options_.remediator.mode));
  return out;
}

}  // namespace vigil::remediator

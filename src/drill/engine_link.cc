// Implements the engine stage over WatchHealth.
#include "drill/engine_link.h"

#include "api/convert.h"
#include "common/thread.h"
#include "fmt/format.h"

namespace vigil::drill {

EngineLink::EngineLink(EngineClient* client, uint32_t gpu) : client_(client), gpu_(gpu) {
  v1::WatchHealthRequest request;
  request.add_gpus(gpu);
  stream_ = client_->WatchHealth(request);
  thread_ = StartNamedThread("vigil-drill-watch", [this] { Run(); });
}

EngineLink::~EngineLink() {
  stream_->Cancel();
  thread_.join();
}

std::string EngineLink::name() const { return fmt::format("the engine at {}", client_->address()); }

void EngineLink::Run() {
  for (;;) {
    const auto event = stream_->Next();
    if (event.kind == HealthSubscription::Event::kCancelled ||
        event.kind == HealthSubscription::Event::kRejected) {
      if (event.kind == HealthSubscription::Event::kRejected) {
        absl::MutexLock lock(&mutex_);
        stream_error_ = std::string(event.error.message());
      }
      return;
    }
    if (event.kind == HealthSubscription::Event::kDisconnected) {
      absl::MutexLock lock(&mutex_);
      stream_error_ = std::string(event.error.message());
      continue;
    }
    const v1::HealthUpdate& update = *event.message;
    for (const v1::GpuHealth& gpu : update.verdict().gpus()) {
      if (gpu.gpu() != gpu_) continue;
      Seen seen{.computed = absl::FromUnixMicros(update.verdict().timestamp_us()),
                .instance_id = update.instance_id(),
                .seq = update.verdict().seq(),
                .status = gpu.status()};
      for (const v1::SystemHealth& system : gpu.systems()) {
        for (const v1::HealthIncident& incident : system.incidents()) {
          seen.injected |= incident.injected();
          seen.summary +=
              fmt::format("{}{} {} {}: {}{}", seen.summary.empty() ? "" : "; ", system.system(),
                          HealthStatusText(incident.status()), incident.code(), incident.message(),
                          incident.injected() ? " [injected]" : "");
        }
      }
      absl::MutexLock lock(&mutex_);
      seen_.push_back(std::move(seen));
    }
  }
}

absl::StatusOr<Observation> EngineLink::Look(const Target& target, Want want, const Mark& since) {
  absl::MutexLock lock(&mutex_);
  for (const Seen& seen : seen_) {
    if (seen.seq <= since.seq || seen.instance_id != target.instance_id) continue;
    const bool worse = HealthStatusNumber(seen.status) > HealthStatusNumber(target.baseline);
    const bool shown = want == Want::kFault ? worse && seen.injected
                                            : IsBack(HealthStatusNumber(seen.status), target);
    if (!shown) continue;
    return Observation{.shown = true,
                       .instance_id = seen.instance_id,
                       .seq = seen.seq,
                       .status = seen.status,
                       .detail = fmt::format("GPU {} {}{}{}", gpu_, HealthStatusText(seen.status),
                                             seen.summary.empty() ? "" : ": ", seen.summary),
                       .at = seen.computed};
  }
  if (!stream_error_.empty() && seen_.empty()) return absl::UnavailableError(stream_error_);
  Observation none;
  if (!seen_.empty()) {
    const Seen& last = seen_.back();
    if (last.instance_id != target.instance_id) {
      // Not a link following the wrong engine: this node's engine restarted under the drill.
      none.failed = true;
      none.detail = fmt::format(
          "the engine restarted during the drill ({} -> {}): what was "
          "injected into the old instance is lost",
          target.instance_id, last.instance_id);
      return none;
    }
    none.instance_id = last.instance_id;
    none.seq = last.seq;
    none.detail = fmt::format("GPU {} {} at seq {}", gpu_, HealthStatusText(last.status), last.seq);
  }
  return none;
}

}  // namespace vigil::drill

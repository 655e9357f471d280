// The drill's engine stage: the engine's verdict as WatchHealth delivers it, every tick, so the
// first tick that shows the fault — and its (instance_id, seq) — is known exactly, not as a
// poll's later look.
//
// Threading: the constructor starts one thread (`vigil-drill-watch`) that reads the stream and
// keeps what each verdict said of the GPU; Look() and the rest are called from the drill's thread
// and read that record under `mutex_`. The destructor cancels the stream and joins the thread.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/engine_client.h"
#include "drill/link.h"

namespace vigil::drill {

class EngineLink : public Link {
 public:
  // `client` (not owned) outlives the link.
  EngineLink(EngineClient* client, uint32_t gpu);
  ~EngineLink() override;

  Stage stage() const override { return Stage::kEngine; }
  std::string name() const override;
  // Nothing to check beyond what the drill checks of the engine itself.
  absl::Status Preflight(const Target&, bool) override { return absl::OkStatus(); }
  // kFault: the first verdict after `since.seq` (of the target's engine instance) in which the GPU
  // is worse than its baseline with an injected incident; kRecovered: the first one with the GPU
  // at its baseline.
  absl::StatusOr<Observation> Look(const Target& target, Want want, const Mark& since) override;

 private:
  struct Seen {  // what one verdict said of the GPU
    absl::Time computed;
    std::string instance_id;
    uint64_t seq = 0;
    v1::HealthStatus status = v1::HEALTH_STATUS_UNSPECIFIED;
    bool injected = false;  // an incident on the GPU was raised from injected data
    std::string summary;    // "driver DCGM_FR_FALLEN_OFF_BUS: XID 79: ..." of its incidents
  };
  void Run();

  EngineClient* const client_;
  const uint32_t gpu_;
  std::unique_ptr<HealthSubscription> stream_;
  absl::Mutex mutex_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mutex_);
  std::string stream_error_ ABSL_GUARDED_BY(mutex_);  // the last disconnect, for the report
  std::thread thread_;
};

}  // namespace vigil::drill

// Implements the node's side of remediation (remediation_relay.h).
#include "healthcheck/remediation_relay.h"

#include "common/env.h"
#include "common/status.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "healthcheck/gpu_pods.h"
#include "kube/object.h"
#include "podresources/pod_mapper.h"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

void AddFaults(const v1::SystemHealth& system, PublishedFaults* faults) {
  for (const v1::HealthIncident& incident : system.incidents()) {
    if (incident.status() != v1::HEALTH_STATUS_FAIL) continue;
    faults->faults.push_back(
        {.gpu = incident.node() ? -1 : static_cast<int>(incident.gpu()),
         .uuid = incident.node() ? "" : incident.uuid(),
         .system = system.system(),
         .code = incident.code(),
         .message = incident.message(),
         .action = incident.recommended_action() == v1::RECOMMENDED_ACTION_UNSPECIFIED
                       ? v1::RECOMMENDED_ACTION_NONE
                       : incident.recommended_action(),
         .injected = incident.injected(),
         .actions_allowed = incident.actions_allowed(),
         .first_seen = absl::FromUnixMicros(incident.first_seen_us())});
  }
}

}  // namespace

RemediationRelay::RemediationRelay(RelayOptions options, kube::KubeApi* api,
                                   std::unique_ptr<EngineClient> engine, NodeSource node)
    : options_(std::move(options)), api_(api), engine_(std::move(engine)), node_(std::move(node)) {}

RemediationRelay::~RemediationRelay() { Stop(); }

void RemediationRelay::Start() {
  thread_ = StartNamedThread("vigil-relay", [this] { Loop(); });
}

void RemediationRelay::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void RemediationRelay::Wake() {
  absl::MutexLock lock(&mutex_);
  dirty_ = true;
}

void RemediationRelay::Loop() {
  std::string last_error;
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      // Every second at least: the node's requests arrive through the reporter's watch, which
      // does not wake this thread.
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return dirty_ || stopping_; };
      options_.clock->AwaitWithTimeout(&mutex_, absl::Condition(&woken), absl::Seconds(1));
      if (stopping_) return;
      dirty_ = false;
    }
    const absl::Status status = RelayOnce();
    const std::string error = status.ok() ? "" : std::string(MessageOf(status));
    if (error != last_error) {
      if (error.empty()) {
        spdlog::info("remediation relay: the API server answers again");
      } else {
        spdlog::warn("remediation relay: {}; retrying", error);
      }
      last_error = error;
    }
  }
}

PublishedFaults RemediationRelay::FaultsOf(const HealthView& view,
                                           const std::optional<GpuPodMap>& pods) {
  PublishedFaults faults{.engine = view.engine_instance_id, .seq = view.verdict.seq()};
  for (const v1::GpuHealth& gpu : view.verdict.gpus()) {
    for (const v1::SystemHealth& system : gpu.systems()) AddFaults(system, &faults);
  }
  for (const v1::SystemHealth& system : view.verdict.node_systems()) AddFaults(system, &faults);
  if (pods.has_value()) {
    faults.pods_known = true;
    for (const PublishedFault& fault : faults.faults) {
      if (fault.gpu < 0 ||
          std::any_of(faults.gpu_pods.begin(), faults.gpu_pods.end(),
                      [&](const GpuPods& known) { return known.uuid == fault.uuid; })) {
        continue;
      }
      const auto listed = std::find_if(view.gpus.begin(), view.gpus.end(), [&](const v1::Gpu& gpu) {
        return gpu.uuid() == fault.uuid;
      });
      GpuPods gpu{
          .uuid = fault.uuid,
          .pods = PodsOfGpu(*pods, fault.uuid, listed != view.gpus.end() ? &*listed : nullptr)};
      faults.gpu_pods.push_back(std::move(gpu));
    }
  }
  return faults;
}

absl::Status RemediationRelay::Patch(const Json& annotations, std::string_view what) {
  const Json patch = {{"metadata", {{"annotations", annotations}}}};
  auto response =
      api_->Call("PATCH", "/api/v1/nodes/" + options_.node_name, kube::kMergePatch, patch.dump());
  if (!response.ok()) {
    ++stats_.api_errors;
    return absl::UnavailableError(fmt::format("writing {} on node {}: {}", what, options_.node_name,
                                              MessageOf(response.status())));
  }
  if (response->status < 200 || response->status >= 300) {
    ++stats_.api_errors;
    return absl::UnavailableError(fmt::format("writing {} on node {}: {} {}", what,
                                              options_.node_name, response->status,
                                              kube::ApiMessage(response->body)));
  }
  return absl::OkStatus();
}

absl::Status RemediationRelay::RelayOnce() {
  const std::optional<Json> node = node_();
  if (!node.has_value()) return absl::OkStatus();  // the reporter has not seen the node yet
  const Json& annotations = kube::At(kube::At(*node, "metadata"), "annotations");
  // A request not answered yet (by this process or, before a restart, by another).
  const struct {
    std::string_view request_key, result_key;
    std::string* answered;
    std::optional<ActionResult>* unwritten;
    ActionResult (RemediationRelay::*act)(const ActionRequest&);
  } kinds[] = {
      {kResetRequestAnnotation, kResetResultAnnotation, &answered_reset_, &unwritten_reset_,
       &RemediationRelay::Reset},
      {kRebootRequestAnnotation, kRebootResultAnnotation, &answered_reboot_, &unwritten_reboot_,
       &RemediationRelay::Reboot},
  };
  for (const auto& kind : kinds) {
    const std::string text = kube::StringAt(annotations, kind.request_key);
    if (text.empty()) continue;
    auto request = ParseRequest(text);
    if (!request.ok()) {
      if (*kind.answered != text) {
        spdlog::error("remediation relay: node {}: {}: not acted on", options_.node_name,
                      MessageOf(request.status()));
        *kind.answered = text;
      }
      continue;
    }
    if (*kind.answered == request->id) continue;
    if (auto answered = ParseResult(kube::StringAt(annotations, kind.result_key));
        answered.ok() && answered->id == request->id) {
      *kind.answered = request->id;
      continue;
    }
    // Acted on once per id: an answer that could not be written is written again next pass,
    // without acting again.
    std::optional<ActionResult>& unwritten = *kind.unwritten;
    if (!unwritten.has_value() || unwritten->id != request->id) {
      unwritten = (this->*kind.act)(*request);
    }
    if (absl::Status written =
            Patch({{std::string(kind.result_key), ResultToJson(*unwritten)}}, kind.result_key);
        !written.ok()) {
      return written;
    }
    unwritten.reset();
    *kind.answered = request->id;
  }
  return absl::OkStatus();
}

ActionResult RemediationRelay::Reset(const ActionRequest& request) {
  ActionResult result{.id = request.id, .outcome = ActionOutcome::kDone};
  std::string said;
  if (request.gpus.empty()) {
    result.outcome = ActionOutcome::kFailed;
    said = "the request names no GPU to reset";
  }
  for (const GpuRef& gpu : request.gpus) {
    v1::ResetGpuRequest call;
    call.set_gpu(gpu.index);
    call.set_uuid(gpu.uuid);
    call.set_reason(request.reason);
    auto reset = engine_->ResetGpu(call);
    if (reset.ok()) {
      said += fmt::format("{}GPU {} reset in {}", said.empty() ? "" : "; ", gpu.index,
                          absl::FormatDuration(absl::Microseconds(reset->duration_us())));
      continue;
    }
    const absl::StatusCode code = reset.status().code();
    // In use (evicted pods still terminating), another reset running, the engine away for a
    // moment: worth asking again. Anything else (no such GPU, lost, the reset failed, not
    // allowed) is final.
    result.outcome = code == absl::StatusCode::kFailedPrecondition ||
                             code == absl::StatusCode::kAborted ||
                             code == absl::StatusCode::kUnavailable
                         ? ActionOutcome::kRefused
                         : ActionOutcome::kFailed;
    said += fmt::format("{}GPU {}: {}{}", said.empty() ? "" : "; ", gpu.index,
                        MessageOf(reset.status()),
                        code == absl::StatusCode::kPermissionDenied
                            ? " (give the health check the engine's token: --engine-token-file)"
                            : "");
    break;
  }
  result.message = said;
  result.finished = options_.clock->Now();
  switch (result.outcome) {
    case ActionOutcome::kDone:
      ++stats_.resets_done;
      break;
    case ActionOutcome::kRefused:
      ++stats_.resets_refused;
      break;
    case ActionOutcome::kFailed:
      ++stats_.resets_failed;
      break;
  }
  spdlog::info("remediation relay: node {}: reset request {}: {}: {}", options_.node_name,
               request.id, ActionOutcomeName(result.outcome), said);
  return result;
}

ActionResult RemediationRelay::Reboot(const ActionRequest& request) {
  ActionResult result{.id = request.id, .finished = options_.clock->Now()};
  if (options_.reboot_sentinel.empty()) {
    result.outcome = ActionOutcome::kFailed;
    result.message =
        "this node's health check has no --reboot-sentinel: it cannot request a reboot (run the "
        "remediator with another --reboot-via, or give the check kured's sentinel path)";
    ++stats_.reboots_failed;
  } else {
    absl::Status written = [&]() -> absl::Status {
      auto file = Env::Default()->NewWritableFile(options_.reboot_sentinel);
      if (!file.ok()) return file.status();
      if (absl::Status appended = (*file)->Append(
              fmt::format("vigil remediator, request {}: {}\n", request.id, request.reason));
          !appended.ok()) {
        return appended;
      }
      return (*file)->Sync();
    }();
    if (written.ok()) {
      result.outcome = ActionOutcome::kDone;
      result.message = fmt::format("wrote {}: the reboot daemon (kured) reboots the node",
                                   options_.reboot_sentinel);
      ++stats_.reboots_requested;
    } else {
      result.outcome = ActionOutcome::kFailed;
      result.message =
          fmt::format("cannot write {}: {}", options_.reboot_sentinel, MessageOf(written));
      ++stats_.reboots_failed;
    }
  }
  spdlog::info("remediation relay: node {}: reboot request {}: {}: {}", options_.node_name,
               request.id, ActionOutcomeName(result.outcome), result.message);
  return result;
}

}  // namespace vigil

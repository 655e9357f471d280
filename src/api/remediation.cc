// Implements the JSON of remediation's node annotations (remediation.h).
#include "api/remediation.h"

#include "api/convert.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace vigil {
namespace {

using Json = nlohmann::json;

std::string TimeText(absl::Time time) {
  if (time == absl::InfinitePast()) return "";
  return absl::FormatTime(absl::RFC3339_full, time, absl::UTCTimeZone());
}

// Reads JSON fields with one error per document: the first field that is missing or mistyped.
class Reader {
 public:
  Reader(std::string_view what, std::string_view text)
      : what_(what), json_(Json::parse(text, nullptr, /*allow_exceptions=*/false)) {
    if (!json_.is_object()) Fail("is not a JSON object");
  }
  const Json& json() const { return json_; }
  bool ok() const { return error_.empty(); }
  absl::Status status() const {
    return ok() ? absl::OkStatus() : absl::InvalidArgumentError(error_);
  }
  void Fail(std::string why) {
    if (error_.empty()) error_ = fmt::format("the {} annotation {}", what_, why);
  }

  std::string String(const Json& object, const char* key, bool required = true) {
    auto it = object.find(key);
    if (it == object.end()) {
      if (required) Fail(fmt::format("has no \"{}\"", key));
      return "";
    }
    if (!it->is_string()) {
      Fail(fmt::format("has a \"{}\" that is not a string", key));
      return "";
    }
    return it->get<std::string>();
  }
  int64_t Int(const Json& object, const char* key, int64_t otherwise = 0) {
    auto it = object.find(key);
    if (it == object.end()) return otherwise;
    if (!it->is_number_integer()) {
      Fail(fmt::format("has a \"{}\" that is not an integer", key));
      return otherwise;
    }
    return it->get<int64_t>();
  }
  bool Bool(const Json& object, const char* key) {
    auto it = object.find(key);
    if (it == object.end()) return false;
    if (!it->is_boolean()) {
      Fail(fmt::format("has a \"{}\" that is not true or false", key));
      return false;
    }
    return it->get<bool>();
  }
  absl::Time Time(const Json& object, const char* key) {
    const std::string text = String(object, key, /*required=*/false);
    if (text.empty()) return absl::InfinitePast();
    absl::Time time;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, text, &time, &error)) {
      Fail(fmt::format("has a \"{}\" that is not an RFC 3339 time: {}", key, text));
      return absl::InfinitePast();
    }
    return time;
  }
  const Json& Array(const Json& object, const char* key) {
    static const Json* const kEmpty = new Json(Json::array());
    auto it = object.find(key);
    if (it == object.end()) return *kEmpty;
    if (!it->is_array()) {
      Fail(fmt::format("has a \"{}\" that is not a list", key));
      return *kEmpty;
    }
    return *it;
  }
  v1::RecommendedAction Action(const Json& object, const char* key) {
    const std::string text = String(object, key, /*required=*/false);
    if (text.empty()) return v1::RECOMMENDED_ACTION_NONE;
    auto action = RecommendedActionFromText(text);
    if (!action) {
      Fail(fmt::format("has an unknown \"{}\": {}", key, text));
      return v1::RECOMMENDED_ACTION_NONE;
    }
    return *action;
  }
  std::vector<QuarantinedDevice> Devices(const Json& object) {
    std::vector<QuarantinedDevice> devices;
    for (const Json& device : Array(object, "devices")) {
      if (!device.is_object()) {
        Fail("has a quarantined device that is not an object");
        break;
      }
      devices.push_back({.uuid = String(device, "uuid"),
                         .driver = String(device, "driver"),
                         .pool = String(device, "pool"),
                         .device = String(device, "device"),
                         .rule = String(device, "rule")});
    }
    return devices;
  }
  std::vector<GpuRef> Gpus(const Json& object) {
    std::vector<GpuRef> gpus;
    for (const Json& gpu : Array(object, "gpus")) {
      if (!gpu.is_object()) {
        Fail("has a GPU that is not an object");
        break;
      }
      const int64_t index = Int(gpu, "index", -1);
      if (index < 0 || index > 1023) Fail("has a GPU without a valid \"index\"");
      gpus.push_back({.index = static_cast<uint32_t>(index), .uuid = String(gpu, "uuid")});
    }
    return gpus;
  }

 private:
  std::string what_;
  Json json_;
  std::string error_;
};

Json DevicesJson(const std::vector<QuarantinedDevice>& devices) {
  Json json = Json::array();
  for (const QuarantinedDevice& device : devices) {
    json.push_back({{"uuid", device.uuid},
                    {"driver", device.driver},
                    {"pool", device.pool},
                    {"device", device.device},
                    {"rule", device.rule}});
  }
  return json;
}

Json GpusJson(const std::vector<GpuRef>& gpus) {
  Json json = Json::array();
  for (const GpuRef& gpu : gpus) json.push_back({{"index", gpu.index}, {"uuid", gpu.uuid}});
  return json;
}

}  // namespace

std::optional<v1::RecommendedAction> RecommendedActionFromText(std::string_view text) {
  for (v1::RecommendedAction action :
       {v1::RECOMMENDED_ACTION_NONE, v1::RECOMMENDED_ACTION_RESTART_APP,
        v1::RECOMMENDED_ACTION_RESET_GPU, v1::RECOMMENDED_ACTION_REBOOT,
        v1::RECOMMENDED_ACTION_INSPECT}) {
    if (RecommendedActionText(action) == text) return action;
  }
  return std::nullopt;
}

std::string FaultsToJson(const PublishedFaults& faults) {
  Json json = {{"engine", faults.engine}, {"seq", faults.seq}, {"faults", Json::array()}};
  for (const PublishedFault& fault : faults.faults) {
    Json item = {{"system", fault.system},
                 {"code", fault.code},
                 {"message", fault.message},
                 {"action", std::string(RecommendedActionText(fault.action))},
                 {"first_seen", TimeText(fault.first_seen)}};
    if (fault.gpu >= 0) {
      item["gpu"] = fault.gpu;
      item["uuid"] = fault.uuid;
    }
    if (fault.injected) item["injected"] = true;
    if (fault.actions_allowed) item["actions_allowed"] = true;
    json["faults"].push_back(std::move(item));
  }
  if (faults.pods_known) {
    Json pods = Json::object();
    for (const GpuPods& gpu : faults.gpu_pods) pods[gpu.uuid] = gpu.pods;
    json["pods"] = std::move(pods);
  }
  if (!faults.devices.empty()) json["devices"] = DevicesJson(faults.devices);
  return json.dump();
}

std::string FaultsIdentity(PublishedFaults faults) {
  if (faults.faults.empty()) return "";
  faults.seq = 0;
  return FaultsToJson(faults);
}

absl::StatusOr<PublishedFaults> ParseFaults(std::string_view text) {
  Reader reader(kFaultsAnnotation, text);
  PublishedFaults faults;
  if (!reader.ok()) return reader.status();
  const Json& json = reader.json();
  faults.engine = reader.String(json, "engine");
  faults.seq = static_cast<uint64_t>(reader.Int(json, "seq"));
  for (const Json& item : reader.Array(json, "faults")) {
    if (!item.is_object()) {
      reader.Fail("has a fault that is not an object");
      break;
    }
    PublishedFault fault{.gpu = static_cast<int>(reader.Int(item, "gpu", -1)),
                         .uuid = reader.String(item, "uuid", /*required=*/false),
                         .system = reader.String(item, "system"),
                         .code = reader.String(item, "code", /*required=*/false),
                         .message = reader.String(item, "message", /*required=*/false),
                         .action = reader.Action(item, "action"),
                         .injected = reader.Bool(item, "injected"),
                         .actions_allowed = reader.Bool(item, "actions_allowed"),
                         .first_seen = reader.Time(item, "first_seen")};
    if (fault.gpu >= 0 && fault.uuid.empty()) reader.Fail("has a GPU fault without a \"uuid\"");
    faults.faults.push_back(std::move(fault));
  }
  if (auto pods = json.find("pods"); pods != json.end()) {
    if (!pods->is_object()) {
      reader.Fail("has \"pods\" that is not an object of GPU UUID to pods");
    } else {
      faults.pods_known = true;
      for (const auto& [uuid, list] : pods->items()) {
        GpuPods gpu{.uuid = uuid};
        if (!list.is_array()) reader.Fail("has the pods of a GPU that are not a list");
        for (const Json& pod : list.is_array() ? list : Json::array()) {
          if (pod.is_string()) gpu.pods.push_back(pod.get<std::string>());
        }
        faults.gpu_pods.push_back(std::move(gpu));
      }
    }
  }
  faults.devices = reader.Devices(json);
  if (!reader.ok()) return reader.status();
  return faults;
}

std::string RequestToJson(const ActionRequest& request) {
  Json json = {
      {"id", request.id}, {"reason", request.reason}, {"requested", TimeText(request.requested)}};
  if (!request.gpus.empty()) json["gpus"] = GpusJson(request.gpus);
  return json.dump();
}

absl::StatusOr<ActionRequest> ParseRequest(std::string_view text) {
  Reader reader("request", text);
  if (!reader.ok()) return reader.status();
  const Json& json = reader.json();
  ActionRequest request{.id = reader.String(json, "id"),
                        .gpus = reader.Gpus(json),
                        .reason = reader.String(json, "reason", /*required=*/false),
                        .requested = reader.Time(json, "requested")};
  if (reader.ok() && request.id.empty()) reader.Fail("has an empty \"id\"");
  if (!reader.ok()) return reader.status();
  return request;
}

std::string_view ActionOutcomeName(ActionOutcome outcome) {
  switch (outcome) {
    case ActionOutcome::kDone:
      return "done";
    case ActionOutcome::kRefused:
      return "refused";
    case ActionOutcome::kFailed:
      return "failed";
  }
  return "failed";
}

std::string ResultToJson(const ActionResult& result) {
  return Json{{"id", result.id},
              {"outcome", std::string(ActionOutcomeName(result.outcome))},
              {"message", result.message},
              {"finished", TimeText(result.finished)}}
      .dump();
}

absl::StatusOr<ActionResult> ParseResult(std::string_view text) {
  Reader reader("result", text);
  if (!reader.ok()) return reader.status();
  const Json& json = reader.json();
  ActionResult result{.id = reader.String(json, "id"),
                      .message = reader.String(json, "message", /*required=*/false),
                      .finished = reader.Time(json, "finished")};
  const std::string outcome = reader.String(json, "outcome");
  bool known = false;
  for (ActionOutcome candidate :
       {ActionOutcome::kDone, ActionOutcome::kRefused, ActionOutcome::kFailed}) {
    if (ActionOutcomeName(candidate) == outcome) {
      result.outcome = candidate;
      known = true;
    }
  }
  if (reader.ok() && !known) reader.Fail(fmt::format("has an unknown \"outcome\": {}", outcome));
  if (!reader.ok()) return reader.status();
  return result;
}

std::string_view RemediationStepName(RemediationStep step) {
  switch (step) {
    case RemediationStep::kIdle:
      return "idle";
    case RemediationStep::kDraining:
      return "draining";
    case RemediationStep::kDrainStuck:
      return "drain-stuck";
    case RemediationStep::kRecovering:
      return "recovering";
    case RemediationStep::kVerifying:
      return "verifying";
    case RemediationStep::kEscalated:
      return "escalated";
  }
  return "idle";
}

std::optional<RemediationStep> ParseRemediationStep(std::string_view name) {
  for (RemediationStep step :
       {RemediationStep::kIdle, RemediationStep::kDraining, RemediationStep::kDrainStuck,
        RemediationStep::kRecovering, RemediationStep::kVerifying, RemediationStep::kEscalated}) {
    if (RemediationStepName(step) == name) return step;
  }
  return std::nullopt;
}

std::string_view DrainPodOutcomeName(DrainPodOutcome outcome) {
  switch (outcome) {
    case DrainPodOutcome::kPending:
      return "pending";
    case DrainPodOutcome::kEvicted:
      return "evicted";
    case DrainPodOutcome::kGone:
      return "gone";
    case DrainPodOutcome::kBlocked:
      return "blocked";
    case DrainPodOutcome::kFailed:
      return "failed";
    case DrainPodOutcome::kRetry:
      return "retry";
    case DrainPodOutcome::kDeleted:
      return "deleted";
  }
  return "pending";
}

std::optional<DrainPodOutcome> ParseDrainPodOutcome(std::string_view name) {
  for (DrainPodOutcome outcome :
       {DrainPodOutcome::kPending, DrainPodOutcome::kEvicted, DrainPodOutcome::kGone,
        DrainPodOutcome::kBlocked, DrainPodOutcome::kFailed, DrainPodOutcome::kRetry,
        DrainPodOutcome::kDeleted}) {
    if (DrainPodOutcomeName(outcome) == name) return outcome;
  }
  return std::nullopt;
}

bool IsDrained(DrainPodOutcome outcome) {
  return outcome == DrainPodOutcome::kEvicted || outcome == DrainPodOutcome::kGone ||
         outcome == DrainPodOutcome::kDeleted;
}

std::string GpuRefsText(const std::vector<GpuRef>& gpus) {
  std::string out;
  for (const GpuRef& gpu : gpus) {
    out += fmt::format("{}GPU {} ({})", out.empty() ? "" : ", ", gpu.index, gpu.uuid);
  }
  return out;
}

std::string_view EpisodeScopeName(EpisodeScope scope) {
  return scope == EpisodeScope::kGpu ? "gpu" : "node";
}

std::string RemediationToJson(const NodeRemediation& state) {
  Json json = {{"step", std::string(RemediationStepName(state.step))},
               {"action", std::string(RecommendedActionText(state.action))},
               {"gpus", GpusJson(state.gpus)},
               {"incident", state.incident},
               {"episode_started", TimeText(state.episode_started)},
               {"step_started", TimeText(state.step_started)},
               {"attempts", Json::array()},
               {"message", state.message}};
  for (absl::Time attempt : state.attempts) json["attempts"].push_back(TimeText(attempt));
  if (!state.request_id.empty()) json["request_id"] = state.request_id;
  if (state.cordoned) json["cordoned"] = true;
  if (!state.drain.empty()) {
    Json pods = Json::array();
    for (const DrainPodState& pod : state.drain) {
      pods.push_back({{"pod", pod.id},
                      {"outcome", std::string(DrainPodOutcomeName(pod.outcome))},
                      {"attempts", pod.attempts}});
    }
    json["drain"] = {{"pods", std::move(pods)},
                     {"rounds", state.drain_rounds},
                     {"next", TimeText(state.drain_next)}};
  }
  if (state.scope != EpisodeScope::kNode)
    json["scope"] = std::string(EpisodeScopeName(state.scope));
  if (!state.devices.empty()) json["devices"] = DevicesJson(state.devices);
  if (state.node_tainted) json["node_tainted"] = true;
  return json.dump();
}

absl::StatusOr<NodeRemediation> ParseRemediation(std::string_view text) {
  Reader reader(kRemediationAnnotation, text);
  if (!reader.ok()) return reader.status();
  const Json& json = reader.json();
  NodeRemediation state;
  const std::string step = reader.String(json, "step");
  if (auto parsed = ParseRemediationStep(step)) {
    state.step = *parsed;
  } else if (reader.ok()) {
    reader.Fail(fmt::format("has an unknown \"step\": {}", step));
  }
  state.action = reader.Action(json, "action");
  state.gpus = reader.Gpus(json);
  state.incident = reader.String(json, "incident", /*required=*/false);
  state.episode_started = reader.Time(json, "episode_started");
  state.step_started = reader.Time(json, "step_started");
  for (const Json& attempt : reader.Array(json, "attempts")) {
    absl::Time time;
    std::string error;
    if (!attempt.is_string() ||
        !absl::ParseTime(absl::RFC3339_full, attempt.get<std::string>(), &time, &error)) {
      reader.Fail("has an attempt that is not an RFC 3339 time");
      break;
    }
    state.attempts.push_back(time);
  }
  state.request_id = reader.String(json, "request_id", /*required=*/false);
  state.cordoned = reader.Bool(json, "cordoned");
  if (const std::string scope = reader.String(json, "scope", /*required=*/false); scope == "gpu") {
    state.scope = EpisodeScope::kGpu;
  } else if (!scope.empty() && scope != "node" && reader.ok()) {
    reader.Fail(fmt::format("has an unknown \"scope\": {}", scope));
  }
  state.devices = reader.Devices(json);
  state.node_tainted = reader.Bool(json, "node_tainted");
  state.message = reader.String(json, "message", /*required=*/false);
  if (auto drain = json.find("drain"); drain != json.end() && drain->is_object()) {
    for (const Json& pod : reader.Array(*drain, "pods")) {
      if (!pod.is_object()) {
        reader.Fail("has a drained pod that is not an object");
        break;
      }
      const std::string outcome = reader.String(pod, "outcome");
      const std::optional<DrainPodOutcome> parsed = ParseDrainPodOutcome(outcome);
      if (!parsed.has_value() && reader.ok()) {
        reader.Fail(fmt::format("has a drained pod with an unknown \"outcome\": {}", outcome));
      }
      state.drain.push_back({.id = reader.String(pod, "pod"),
                             .outcome = parsed.value_or(DrainPodOutcome::kPending),
                             .attempts = static_cast<int>(reader.Int(pod, "attempts"))});
    }
    state.drain_rounds = static_cast<int>(reader.Int(*drain, "rounds"));
    state.drain_next = reader.Time(*drain, "next");
  }
  if (!reader.ok()) return reader.status();
  return state;
}

}  // namespace vigil

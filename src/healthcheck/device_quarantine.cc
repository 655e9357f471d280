// Implements DeviceQuarantine: DeviceTaintRules for the failing GPUs that are DRA devices.
#include "healthcheck/device_quarantine.h"

#include <algorithm>

#include "common/status.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "kube/discovery.h"
#include "kube/events.h"
#include "kube/object.h"
#include "spdlog/spdlog.h"

namespace vigil {

namespace {

using Json = nlohmann::json;

// DeviceTaintRules: v1 from 1.37, v1beta2 from 1.36, v1alpha3 from 1.33 (removed in 1.39).

// How often the thread looks again without being woken: the hysteresis is timed by it.
constexpr absl::Duration kRecheck = absl::Seconds(1);

}  // namespace

absl::StatusOr<QuarantineMode> ParseQuarantineMode(std::string_view text) {
  if (text == "auto") return QuarantineMode::kAuto;
  if (text == "gpu") return QuarantineMode::kGpu;
  if (text == "node") return QuarantineMode::kNode;
  return absl::InvalidArgumentError(fmt::format(
      "--quarantine '{}' is not a quarantine: give gpu (one DeviceTaintRule per failing GPU), "
      "node (the node taint) or auto (gpu where the node's GPUs are DRA devices, else node)",
      text));
}

std::string_view QuarantineModeName(QuarantineMode mode) {
  switch (mode) {
    case QuarantineMode::kAuto:
      return "auto";
    case QuarantineMode::kGpu:
      return "gpu";
    case QuarantineMode::kNode:
      return "node";
  }
  return "unknown";
}

std::vector<FailingGpu> FailingGpusOf(const v1::HealthVerdict& verdict) {
  std::vector<FailingGpu> failing;
  for (const v1::GpuHealth& gpu : verdict.gpus()) {
    if (gpu.status() != v1::HEALTH_STATUS_FAIL) continue;
    for (const v1::SystemHealth& system : gpu.systems()) {
      for (const v1::HealthIncident& incident : system.incidents()) {
        // A drill's incident injected without --allow-actions drives no action.
        if (incident.status() != v1::HEALTH_STATUS_FAIL ||
            (incident.injected() && !incident.actions_allowed())) {
          continue;
        }
        failing.push_back({.gpu = gpu.gpu(), .uuid = gpu.uuid(), .code = incident.code()});
        break;
      }
      if (!failing.empty() && failing.back().gpu == gpu.gpu()) break;
    }
  }
  return failing;
}

DeviceQuarantine::DeviceQuarantine(DeviceQuarantineOptions options, kube::KubeApi* api,
                                   const DraDevices* devices, InputSource input)
    : options_(std::move(options)), api_(api), devices_(devices), input_(std::move(input)) {}

DeviceQuarantine::~DeviceQuarantine() { Stop(); }

void DeviceQuarantine::Start() {
  if (thread_.joinable()) return;
  thread_ = StartNamedThread("vigil-quarantine", [this] { Run(); });
}

void DeviceQuarantine::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void DeviceQuarantine::Wake() {
  absl::MutexLock lock(&mutex_);
  woken_ = true;
}

void DeviceQuarantine::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mutex_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return woken_ || stopping_; };
      mutex_.AwaitWithTimeout(absl::Condition(&ready), kRecheck);
      if (stopping_) return;
      woken_ = false;
    }
    if (absl::Status status = ReconcileOnce(); !status.ok()) {
      absl::MutexLock lock(&mutex_);
      if (const std::string error(MessageOf(status)); error != last_error_) {
        spdlog::warn("kubernetes: per-GPU quarantine: {}; trying again", error);
        last_error_ = error;
      }
    }
  }
}

bool DeviceQuarantine::Active() const {
  if (options_.mode == QuarantineMode::kNode) return false;
  {
    absl::MutexLock lock(&mutex_);
    if (rule_version_.empty()) return false;
  }
  return !devices_->Devices().empty();  // its own lock: never under ours
}

bool DeviceQuarantine::CoversEvery(const std::vector<v1::Gpu>& gpus,
                                   const std::vector<FailingGpu>& failing) const {
  if (failing.empty()) return true;
  if (!Active()) return false;
  {
    absl::MutexLock lock(&mutex_);
    for (const FailingGpu& gpu : failing) {
      if (refused_.contains(gpu.uuid)) return false;
    }
  }
  const dra::DeviceMap map = devices_->Map(gpus);
  return std::all_of(failing.begin(), failing.end(),
                     [&](const FailingGpu& gpu) { return map.Find(gpu.gpu) != nullptr; });
}

std::string DeviceQuarantine::RulesPath() const {
  return "/apis/resource.k8s.io/" + rule_version_ + "/devicetaintrules";
}

std::string DeviceQuarantine::RuleName(const std::string& node, const std::string& device) {
  return fmt::format("vigil-{}-{}", node, device);
}

void DeviceQuarantine::PostEvent(std::string_view type, std::string_view reason,
                                 std::string message) {
  const absl::Time now = options_.clock->Now();
  const nlohmann::json event =
      kube::NodeEvent({.name = fmt::format("{}.{:x}.q{}", options_.node_name,
                                           absl::ToUnixNanos(now), ++events_posted_),
                       .ns = options_.event_namespace,
                       .node = options_.node_name,
                       .type = type,
                       .reason = reason,
                       .message = std::move(message),
                       .component = "vigil-healthcheck",
                       .instance = options_.node_name,
                       .time = now});
  absl::StatusOr<kube::KubeResponse> response =
      api_->Call("POST", "/api/v1/namespaces/" + options_.event_namespace + "/events",
                 kube::kJsonContent, event.dump());
  if (response.ok() && response->status >= 200 && response->status < 300) {
    ++stats_.events;
    return;
  }
  ++stats_.api_errors;
  spdlog::warn("kubernetes: posting the {} Event for node {} failed: {}", reason,
               options_.node_name, kube::AnswerText(response));
}

absl::Status DeviceQuarantine::Discover() {
  {
    absl::MutexLock lock(&mutex_);
    if (!rule_version_.empty() || no_rule_api_) return absl::OkStatus();
  }
  absl::StatusOr<std::string> version = kube::ServedVersion(
      *api_, "resource.k8s.io", "devicetaintrules", kube::kDeviceTaintRuleVersions);
  absl::MutexLock lock(&mutex_);
  if (version.status().code() == absl::StatusCode::kNotFound) {
    no_rule_api_ = true;
    spdlog::warn(
        "kubernetes: {}: a failing GPU takes its node out of service (the node taint); "
        "per-GPU quarantine needs DeviceTaintRules (Kubernetes 1.33+, feature DRADeviceTaintRules)",
        MessageOf(version.status()));
    return absl::OkStatus();
  }
  if (!version.ok()) return version.status();
  rule_version_ = *version;
  spdlog::info("kubernetes: per-GPU quarantine through resource.k8s.io/{} DeviceTaintRules ({})",
               rule_version_, options_.taint_key);
  return absl::OkStatus();
}

absl::Status DeviceQuarantine::Adopt() {
  std::string path;
  {
    absl::MutexLock lock(&mutex_);
    if (adopted_ || rule_version_.empty()) return absl::OkStatus();
    path = RulesPath();
  }
  const std::string selector = fmt::format("{}={}", kRuleNodeLabel, options_.node_name);
  absl::StatusOr<kube::KubeResponse> response =
      api_->Call("GET", path + "?labelSelector=" + kube::QueryEscape(selector), "", "");
  if (!response.ok() || response->status != 200) {
    ++stats_.api_errors;
    return absl::UnavailableError(
        fmt::format("listing this node's DeviceTaintRules: {}", kube::AnswerText(response)));
  }
  const Json list = Json::parse(response->body, nullptr, false);
  absl::MutexLock lock(&mutex_);
  for (const Json& rule : kube::At(list, "items")) {
    const Json& selector_json = kube::At(kube::At(rule, "spec"), "deviceSelector");
    const std::string device = kube::StringAt(selector_json, "device");
    if (device.empty()) continue;
    const Json& labels = kube::At(kube::At(rule, "metadata"), "labels");
    rules_[device] = {.name = kube::StringAt(kube::At(rule, "metadata"), "name"),
                      .uuid = kube::StringAt(labels, kRuleGpuLabel),
                      .driver = kube::StringAt(selector_json, "driver"),
                      .pool = kube::StringAt(selector_json, "pool"),
                      .code = kube::StringAt(kube::At(kube::At(rule, "spec"), "taint"), "value")};
  }
  adopted_ = true;
  if (!rules_.empty()) {
    spdlog::info("kubernetes: {} DeviceTaintRule(s) of this node found at start", rules_.size());
  }
  return absl::OkStatus();
}

absl::Status DeviceQuarantine::Create(const dra::Device& device, const FailingGpu& failing,
                                      const std::string& engine_instance) {
  const std::string name = RuleName(options_.node_name, device.name);
  std::string path, version;
  {
    absl::MutexLock lock(&mutex_);
    path = RulesPath();
    version = rule_version_;
  }
  Json labels = {{std::string(kRuleNodeLabel), options_.node_name},
                 {std::string(kRuleGpuLabel), failing.uuid},
                 {"app.kubernetes.io/managed-by", "vigil-healthcheck"}};
  if (!engine_instance.empty()) labels[std::string(kRuleEngineLabel)] = engine_instance;
  const Json rule = {
      {"apiVersion", "resource.k8s.io/" + version},
      {"kind", "DeviceTaintRule"},
      {"metadata", {{"name", name}, {"labels", labels}}},
      {"spec",
       {{"deviceSelector",
         {{"driver", device.driver}, {"pool", device.pool}, {"device", device.name}}},
        {"taint",
         {{"key", options_.taint_key},
          {"value", failing.code},
          {"effect", options_.effect},
          {"timeAdded", kube::Time(options_.clock->Now())}}}}}};
  absl::StatusOr<kube::KubeResponse> response =
      api_->Call("POST", path, kube::kJsonContent, rule.dump());
  if (!response.ok()) {
    ++stats_.api_errors;
    return absl::UnavailableError(
        fmt::format("creating DeviceTaintRule {}: {}", name, MessageOf(response.status())));
  }
  // 409: made by an earlier try whose answer was lost, or before a restart.
  if (response->status == 201 || response->status == 200 || response->status == 409) {
    ++stats_.rules_created;
    {
      absl::MutexLock lock(&mutex_);
      rules_[device.name] = {.name = name,
                             .uuid = failing.uuid,
                             .driver = device.driver,
                             .pool = device.pool,
                             .code = failing.code};
    }
    const std::string message = fmt::format(
        "GPU {} ({}) FAILs ({}): device {}/{}/{} tainted {}={}:{} (DeviceTaintRule {}); node {} "
        "stays schedulable for its other GPUs",
        failing.gpu, failing.uuid, failing.code, device.driver, device.pool, device.name,
        options_.taint_key, failing.code, options_.effect, name, options_.node_name);
    spdlog::warn("kubernetes: {}", message);
    PostEvent("Warning", "GpuQuarantined", message);
    return absl::OkStatus();
  }
  if (response->status == 422 || response->status == 400 || response->status == 403 ||
      response->status == 404) {
    // Refused for good: the node taint covers the GPU instead (CoversEvery() false).
    ++stats_.rules_refused;
    const std::string cause = kube::ApiMessage(response->body);
    {
      absl::MutexLock lock(&mutex_);
      refused_[failing.uuid] = fmt::format("HTTP {}: {}", response->status, cause);
    }
    const std::string message = fmt::format(
        "the API refused DeviceTaintRule {} for GPU {} ({}): HTTP {}: {}; tainting node {} "
        "instead, so the GPU is not left schedulable",
        name, failing.gpu, failing.uuid, response->status, cause, options_.node_name);
    spdlog::error("kubernetes: {}", message);
    PostEvent("Warning", "GpuQuarantineRefused", message);
    return absl::OkStatus();
  }
  ++stats_.api_errors;
  return absl::UnavailableError(fmt::format("creating DeviceTaintRule {}: HTTP {}: {}", name,
                                            response->status, kube::ApiMessage(response->body)));
}

void DeviceQuarantine::RefuseByBreaker(const dra::Device& device, const FailingGpu& failing,
                                       const std::string& why) {
  ++stats_.rules_refused;
  {
    absl::MutexLock lock(&mutex_);
    refused_[failing.uuid] = "circuit breaker open: " + why;
  }
  const std::string message = fmt::format(
      "not quarantining GPU {} ({}, device {}/{}/{}): the circuit breaker is open ({}); a "
      "fleet-wide problem is not taken out of service GPU by GPU",
      failing.gpu, failing.uuid, device.driver, device.pool, device.name, why);
  spdlog::error("kubernetes: {}", message);
  PostEvent("Warning", "GpuQuarantineRefused", message);
}

absl::Status DeviceQuarantine::Delete(const std::string& device) {
  std::string path, name;
  {
    absl::MutexLock lock(&mutex_);
    path = RulesPath();
    name = rules_.at(device).name;
  }
  absl::StatusOr<kube::KubeResponse> response = api_->Call("DELETE", path + "/" + name, "", "");
  if (!response.ok() ||
      (response->status != 200 && response->status != 202 && response->status != 404)) {
    ++stats_.api_errors;
    return absl::UnavailableError(
        fmt::format("deleting DeviceTaintRule {}: {}", name, kube::AnswerText(response)));
  }
  ++stats_.rules_deleted;
  {
    absl::MutexLock lock(&mutex_);
    rules_.erase(device);
  }
  const std::string message = fmt::format(
      "device {} healthy for {}: DeviceTaintRule {} removed, the GPU is back in service", device,
      absl::FormatDuration(options_.untaint_after), name);
  spdlog::info("kubernetes: {}", message);
  PostEvent("Normal", "GpuReleased", message);
  return absl::OkStatus();
}

absl::Status DeviceQuarantine::ReconcileOnce() {
  if (options_.mode == QuarantineMode::kNode) return absl::OkStatus();
  if (absl::Status status = Discover(); !status.ok()) return status;
  if (absl::Status status = Adopt(); !status.ok()) return status;
  {
    absl::MutexLock lock(&mutex_);
    if (rule_version_.empty()) return absl::OkStatus();
  }
  const Input input = input_();
  if (!input.failing.has_value()) return absl::OkStatus();  // no fresh verdict: change nothing
  const dra::DeviceMap map = devices_->Map(input.gpus);
  const absl::Time now = options_.clock->Now();
  std::set<std::string> failing_devices;
  std::set<std::string> failing_uuids;
  absl::Status first_error;
  bool changed = false;
  for (const FailingGpu& failing : *input.failing) {
    failing_uuids.insert(failing.uuid);
    const dra::Device* device = map.Find(failing.gpu);
    if (device == nullptr) continue;  // not a DRA device: the node taint covers it
    failing_devices.insert(device->name);
    bool held = false, refused = false;
    {
      absl::MutexLock lock(&mutex_);
      auto rule = rules_.find(device->name);
      if (rule != rules_.end()) {
        rule->second.healthy_since = absl::InfinitePast();
        held = true;
      }
      refused = refused_.contains(failing.uuid);
    }
    if (held || refused) continue;
    changed = true;
    // The remediator's published breaker, counting GPUs out of service across the fleet: a
    // fleet-wide false alarm must not quarantine the fleet's GPUs one by one.
    if (std::optional<std::string> why =
            options_.breaker_refusal ? options_.breaker_refusal() : std::nullopt) {
      RefuseByBreaker(*device, failing, *why);
      continue;
    }
    if (absl::Status created = Create(*device, failing, input.engine_instance);
        !created.ok() && first_error.ok()) {
      first_error = created;
    }
  }
  std::vector<std::string> expired;
  {
    absl::MutexLock lock(&mutex_);
    // A refusal holds while its GPU fails; a new failure later tries a rule again.
    for (auto it = refused_.begin(); it != refused_.end();) {
      it = failing_uuids.contains(it->first) ? std::next(it) : refused_.erase(it);
    }
    for (auto& [device, rule] : rules_) {
      if (failing_devices.contains(device)) continue;
      if (rule.healthy_since == absl::InfinitePast()) rule.healthy_since = now;
      if (now - rule.healthy_since >= options_.untaint_after) expired.push_back(device);
    }
  }
  for (const std::string& device : expired) {
    changed = true;
    if (absl::Status deleted = Delete(device); !deleted.ok() && first_error.ok()) {
      first_error = deleted;
    }
  }
  if (changed && options_.on_change) options_.on_change();
  return first_error;
}

std::vector<QuarantinedDevice> DeviceQuarantine::Quarantined() const {
  absl::MutexLock lock(&mutex_);
  std::vector<QuarantinedDevice> out;
  for (const auto& [device, rule] : rules_) {
    out.push_back({.uuid = rule.uuid,
                   .driver = rule.driver,
                   .pool = rule.pool,
                   .device = device,
                   .rule = rule.name});
  }
  return out;
}

Json DeviceQuarantine::StatusJson() const {
  const bool active = Active();
  absl::MutexLock lock(&mutex_);
  Json rules = Json::array();
  for (const auto& [device, rule] : rules_) {
    rules.push_back({{"device", device},
                     {"rule", rule.name},
                     {"gpu_uuid", rule.uuid},
                     {"value", rule.code},
                     {"healthy", rule.healthy_since != absl::InfinitePast()}});
  }
  Json refused = Json::object();
  for (const auto& [uuid, why] : refused_) refused[uuid] = why;
  return {{"mode", QuarantineModeName(options_.mode)},
          // In force (Active()): a GPU's FAIL takes its device out of service, not the node.
          {"active", active},
          {"taint_key", options_.taint_key},
          {"effect", options_.effect},
          {"api_version", rule_version_},
          {"rule_api", no_rule_api_            ? "absent"
                       : rule_version_.empty() ? "unknown"
                                               : "served"},
          {"rules", std::move(rules)},
          {"refused", std::move(refused)},
          {"rules_created", stats_.rules_created.load()},
          {"rules_deleted", stats_.rules_deleted.load()},
          {"rules_refused", stats_.rules_refused.load()}};
}

}  // namespace vigil

// Implements the fake Kubernetes API server over cpp-httplib's TLS server.
#include "testing/fake_kube_api.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>

#include "absl/time/clock.h"
#include "fmt/format.h"
#include "httplib.h"

namespace vigil::testing {
namespace {

using Json = nlohmann::json;

Json Status(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", Json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

bool IsKubeTime(const Json& value) {
  if (!value.is_string()) return false;
  absl::Time time;
  std::string error;
  return absl::ParseTime(absl::RFC3339_full, value.get<std::string>(), &time, &error);
}

// Strategic merge as the API server applies it to the fields the health check touches: lists of
// conditions and addresses merge by their "type" key, other lists are replaced, null deletes.
Json StrategicMerge(Json target, const Json& patch) {
  if (!patch.is_object()) return patch;
  if (!target.is_object()) target = Json::object();
  for (const auto& [key, value] : patch.items()) {
    if (value.is_null()) {
      target.erase(key);
    } else if (value.is_array() && (key == "conditions" || key == "addresses") &&
               target.contains(key) && target[key].is_array()) {
      for (const Json& element : value) {
        bool merged = false;
        for (Json& existing : target[key]) {
          if (element.contains("type") && existing.value("type", Json()) == element["type"]) {
            existing = StrategicMerge(existing, element);
            merged = true;
          }
        }
        if (!merged) target[key].push_back(element);
      }
    } else if (value.is_object()) {
      target[key] = StrategicMerge(target.contains(key) ? target[key] : Json(), value);
    } else {
      target[key] = value;
    }
  }
  return target;
}

// The validation the real API server applies to the parts of a Node we write; "" when valid.
std::string ValidateNode(const Json& node) {
  const Json& taints = node["spec"].value("taints", Json::array());
  std::set<std::pair<std::string, std::string>> seen;
  for (const Json& taint : taints) {
    const std::string key = taint.value("key", "");
    const std::string effect = taint.value("effect", "");
    if (key.empty()) return "spec.taints[].key: Required value";
    if (effect != "NoSchedule" && effect != "PreferNoSchedule" && effect != "NoExecute") {
      return fmt::format("spec.taints[].effect: Unsupported value: \"{}\"", effect);
    }
    if (!seen.emplace(key, effect).second) {
      return "spec.taints: Duplicate value: taints must be unique by key and effect pair";
    }
  }
  const Json& annotations = node["metadata"].value("annotations", Json::object());
  for (const auto& [key, value] : annotations.items()) {
    if (!value.is_string()) return fmt::format("metadata.annotations[{}]: must be a string", key);
  }
  for (const Json& condition : node["status"].value("conditions", Json::array())) {
    if (!condition.contains("type") || !condition["type"].is_string()) {
      return "status.conditions[].type: Required value";
    }
    const std::string status = condition.value("status", "");
    if (status != "True" && status != "False" && status != "Unknown") {
      return fmt::format("status.conditions[].status: Unsupported value: \"{}\"", status);
    }
  }
  return "";
}

// A label selector of "k=v", "k==v", "k!=v", "k" and "!k" terms, comma-separated.
bool Matches(const Json& labels, const std::string& selector) {
  if (selector.empty()) return true;
  std::stringstream terms(selector);
  for (std::string term; std::getline(terms, term, ',');) {
    size_t at;
    if ((at = term.find("!=")) != std::string::npos) {
      if (labels.value(term.substr(0, at), "") == term.substr(at + 2)) return false;
    } else if ((at = term.find("==")) != std::string::npos) {
      if (labels.value(term.substr(0, at), "\x01") != term.substr(at + 2)) return false;
    } else if ((at = term.find('=')) != std::string::npos) {
      if (labels.value(term.substr(0, at), "\x01") != term.substr(at + 1)) return false;
    } else if (term.starts_with("!")) {
      if (labels.contains(term.substr(1))) return false;
    } else if (!labels.contains(term)) {
      return false;
    }
  }
  return true;
}

// Whether `node` matches the label selector.
bool Selected(const Json& node, const std::string& selector) {
  return Matches(node["metadata"].value("labels", Json::object()), selector);
}

// The one field selector each collection serves, as the real server indexes them: pods by
// "spec.nodeName=NODE", nodes and ConfigMaps by "metadata.name=NAME".
constexpr std::string_view kByNode = "spec.nodeName=";
constexpr std::string_view kByName = "metadata.name=";

// The object's value of the field a selector term names ("spec.nodeName" or "metadata.name").
std::string FieldValue(const Json& object, std::string_view field) {
  const bool spec = field == "spec.nodeName" || field == "spec.driver";
  const char* parent = spec ? "spec" : "metadata";
  const char* key = field == "spec.nodeName" ? "nodeName"
                    : field == "spec.driver" ? "driver"
                                             : "name";
  if (!object.contains(parent) || !object[parent].is_object()) return "";
  return object[parent].value(key, "");
}

// The namespace of a namespaced collection's path ("/api/v1/namespaces/NS/configmaps").
std::string NamespaceOf(const std::string& path) {
  constexpr std::string_view kPrefix = "/api/v1/namespaces/";
  if (!path.starts_with(kPrefix)) return "";
  const std::string rest = path.substr(kPrefix.size());
  return rest.substr(0, rest.find('/'));
}

// The resource.k8s.io version of a path ("/apis/resource.k8s.io/v1beta2/resourceslices").
std::string DraVersionOf(const std::string& path) {
  constexpr std::string_view kPrefix = "/apis/resource.k8s.io/";
  if (!path.starts_with(kPrefix)) return "";
  const std::string rest = path.substr(kPrefix.size());
  return rest.substr(0, rest.find('/'));
}

// A ResourceSlice stored in the v1 shape, as `version` serves it: v1beta1 and v1alpha3 keep each
// device's attributes and capacity under `basic`.
Json SliceIn(const Json& slice, const std::string& version) {
  Json out = slice;
  out["apiVersion"] = "resource.k8s.io/" + version;
  if ((version != "v1beta1" && version != "v1alpha3") || !out.contains("spec") ||
      !out["spec"].contains("devices")) {
    return out;
  }
  for (Json& device : out["spec"]["devices"]) {
    Json basic = Json::object();
    for (const char* key : {"attributes", "capacity"}) {
      if (device.contains(key)) {
        basic[key] = device[key];
        device.erase(key);
      }
    }
    device["basic"] = std::move(basic);
  }
  return out;
}

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// A label value: empty, or at most 63 of [A-Za-z0-9_.-], beginning and ending alphanumeric.
bool IsLabelValue(const std::string& value) {
  if (value.empty()) return true;
  if (value.size() > 63 || !IsAlnum(value.front()) || !IsAlnum(value.back())) return false;
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

// A DNS subdomain (RFC 1123): lower-case alphanumerics, '-' and '.', at most 253.
bool IsDnsSubdomain(const std::string& name) {
  static const std::regex subdomain(
      "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  return !name.empty() && name.size() <= 253 && std::regex_match(name, subdomain);
}

// A qualified name (a label's key): [PREFIX/]NAME, NAME a non-empty label value, PREFIX a DNS
// subdomain.
bool IsQualifiedName(const std::string& key) {
  const size_t slash = key.find('/');
  const std::string name = slash == std::string::npos ? key : key.substr(slash + 1);
  if (name.empty() || !IsLabelValue(name)) return false;
  return slash == std::string::npos || IsDnsSubdomain(key.substr(0, slash));
}

// A query parameter of the request, "" when absent.
std::string Param(const KubeRequest& request, const std::string& key) {
  auto it = request.params.find(key);
  return it == request.params.end() ? std::string() : it->second;
}

}  // namespace

namespace {

std::string ConditionField(const Json& node, const std::string& type, const char* field) {
  if (!node.is_object() || !node.contains("status")) return "";
  for (const Json& condition : node["status"].value("conditions", Json::array())) {
    if (condition.value("type", "") == type) return condition.value(field, "");
  }
  return "";
}

}  // namespace

std::string ConditionStatus(const Json& node, const std::string& type) {
  return ConditionField(node, type, "status");
}

std::string ConditionMessage(const Json& node, const std::string& type) {
  return ConditionField(node, type, "message");
}

bool HasNoScheduleTaint(const Json& node, const std::string& key) {
  if (!node.is_object() || !node.contains("spec")) return false;
  for (const Json& taint : node["spec"].value("taints", Json::array())) {
    if (taint.value("key", "") == key && taint.value("effect", "") == "NoSchedule") return true;
  }
  return false;
}

KubeCredentials MakeKubeCredentials(const std::string& dir, std::string* error) {
  KubeCredentials credentials{.cert_path = dir + "/apiserver.crt",
                              .key_path = dir + "/apiserver.key",
                              .service_account_dir = dir + "/serviceaccount",
                              .token = "token-of-vigil-healthcheck-1"};
  const std::string command = fmt::format(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout {} "
      "-out {} -days 2 -subj /CN=kube-apiserver -addext subjectAltName=IP:127.0.0.1 "
      ">{}/openssl.log 2>&1",
      credentials.key_path, credentials.cert_path, dir);
  if (std::system(command.c_str()) != 0) {
    *error = "openssl could not make a certificate: see " + dir + "/openssl.log";
    return {};
  }
  std::filesystem::create_directories(credentials.service_account_dir);
  std::filesystem::copy_file(credentials.cert_path, credentials.service_account_dir + "/ca.crt");
  std::ofstream(credentials.service_account_dir + "/token") << credentials.token << "\n";
  std::ofstream(credentials.service_account_dir + "/namespace") << "vigil";
  return credentials;
}

struct FakeKubeApi::Watcher {
  Kind kind = Kind::kNode;
  std::string version;   // of resource.k8s.io, for a ResourceSlice watch: the shape it is sent in
  uint64_t cursor = 0;   // changes after this resourceVersion are still to be sent
  std::string selector;  // labelSelector
  // fieldSelector "FIELD=VALUE" split (FIELD "" for none); a namespaced collection's namespace.
  std::string field, field_value, ns;
  bool bookmarks = false;
  absl::Time deadline;  // timeoutSeconds, on real time
  absl::Time next_bookmark;
  uint64_t drops = 0, expiries = 0, bookmark_calls = 0;  // the counts when it opened or last sent
  std::string first;  // what to send first: synthetic ADDED events, or an ERROR
  bool end_after_first = false;
  bool Wants(const Json& object) const {
    return Selected(object, selector) &&
           (field.empty() || FieldValue(object, field) == field_value) &&
           (ns.empty() || object["metadata"].value("namespace", "") == ns);
  }
};

namespace {

std::string WatchLine(std::string_view type, const Json& object) {
  return Json{{"type", type}, {"object", object}}.dump() + "\n";
}

}  // namespace

std::unique_ptr<FakeKubeApi> FakeKubeApi::Start(const std::string& dir, std::string* error,
                                                int threads) {
  const KubeCredentials credentials = MakeKubeCredentials(dir, error);
  if (!error->empty()) return nullptr;
  auto api = std::make_unique<FakeKubeApi>(credentials, threads);
  if (api->port() == 0) {
    *error = "the fake API server could not listen on 127.0.0.1";
    return nullptr;
  }
  setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", std::to_string(api->port()).c_str(), 1);
  return api;
}

FakeKubeApi::FakeKubeApi(const KubeCredentials& credentials, int threads)
    : credentials_(credentials) {
  {
    absl::MutexLock lock(&mutex_);
    token_ = credentials.token;
  }
  server_ = std::make_unique<httplib::SSLServer>(credentials.cert_path.c_str(),
                                                 credentials.key_path.c_str());
  if (!server_->is_valid()) return;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  auto serve = [this](const char* method) {
    return [this, method](const httplib::Request& http, httplib::Response& response) {
      Serve(method, http, response);
    };
  };
  server_->Get(".*", serve("GET"));
  server_->Post(".*", serve("POST"));
  server_->Patch(".*", serve("PATCH"));
  server_->Put(".*", serve("PUT"));
  server_->Delete(".*", serve("DELETE"));
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) {
    port_ = 0;
    return;
  }
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_ended_ = true;
  });
}

void FakeKubeApi::Serve(const char* method, const httplib::Request& http,
                        httplib::Response& response) {
  KubeRequest request{.method = method,
                      .path = http.path,
                      .content_type = http.get_header_value("Content-Type"),
                      .authorization = http.get_header_value("Authorization"),
                      .user_agent = http.get_header_value("User-Agent"),
                      .body = http.body,
                      .received = absl::Now()};
  for (const auto& [key, value] : http.params) {
    request.params[key] = value;
  }
  absl::Duration delay;
  {
    absl::MutexLock lock(&mutex_);
    delay = delay_;
  }
  absl::SleepFor(delay);  // an API server under load
  Answer answer;
  std::shared_ptr<Watcher> watcher;
  {
    absl::MutexLock lock(&mutex_);
    requests_.push_back(request);
    answer = Handle(request);
    if (answer.status == 0) watcher = OpenWatch(request);  // a watch to stream
  }
  if (watcher != nullptr) {
    response.status = 200;
    response.set_chunked_content_provider(
        "application/json",
        [this, watcher](size_t, httplib::DataSink& sink) {
          std::string out;
          bool drop = false;
          const bool more = ServeWatch(*watcher, &out, &drop);
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (more) return true;
          if (drop) return false;  // no final chunk: the client sees a broken stream
          sink.done();
          return true;
        },
        [this](bool) {
          absl::MutexLock lock(&mutex_);
          --open_watches_;
        });
    return;
  }
  response.status = answer.status;
  if (answer.retry_after > 0) {
    response.set_header("Retry-After", std::to_string(answer.retry_after));
  }
  response.set_content(answer.body.dump(), "application/json");
}

std::shared_ptr<FakeKubeApi::Watcher> FakeKubeApi::OpenWatch(const KubeRequest& request) {
  auto watcher = std::make_shared<Watcher>();
  watcher->kind = request.path == "/api/v1/pods"              ? Kind::kPod
                  : request.path == "/api/v1/nodes"           ? Kind::kNode
                  : request.path.ends_with("/resourceslices") ? Kind::kResourceSlice
                                                              : Kind::kConfigMap;
  if (watcher->kind == Kind::kResourceSlice) watcher->version = DraVersionOf(request.path);
  watcher->selector = Param(request, "labelSelector");
  if (const std::string field = Param(request, "fieldSelector"); !field.empty()) {
    const size_t equals = field.find('=');
    watcher->field = field.substr(0, equals);
    watcher->field_value = field.substr(equals + 1);
  }
  if (watcher->kind == Kind::kConfigMap) watcher->ns = NamespaceOf(request.path);
  watcher->bookmarks = Param(request, "allowWatchBookmarks") == "true";
  const std::string timeout_text = Param(request, "timeoutSeconds");
  const int timeout = timeout_text.empty() ? 1800 : std::atoi(timeout_text.c_str());
  watcher->deadline = absl::Now() + absl::Seconds(timeout);
  watcher->next_bookmark = absl::Now() + kBookmarkInterval;
  watcher->drops = drops_;
  watcher->expiries = expiries_;
  watcher->bookmark_calls = bookmarks_;
  const std::string from = Param(request, "resourceVersion");
  if (from.empty() || from == "0") {
    // No resourceVersion: every object now, as synthetic ADDED events, then changes.
    if (watcher->kind == Kind::kNode) {
      for (const auto& [name, node] : nodes_) {
        if (watcher->Wants(node)) watcher->first += WatchLine("ADDED", node);
      }
    } else if (watcher->kind == Kind::kResourceSlice) {
      for (const auto& [name, slice] : resource_slices_) {
        if (watcher->Wants(slice)) {
          watcher->first += WatchLine("ADDED", SliceIn(slice, watcher->version));
        }
      }
    } else {
      for (const auto& [key, object] : watcher->kind == Kind::kPod ? pods_ : config_maps_) {
        if (watcher->Wants(object)) watcher->first += WatchLine("ADDED", object);
      }
    }
    watcher->cursor = resource_version_;
  } else {
    watcher->cursor = std::strtoull(from.c_str(), nullptr, 10);
    if (watcher->cursor < compacted_) {
      watcher->first = WatchLine(
          "ERROR", Status(410, "Expired",
                          fmt::format("too old resource version: {} ({})", from, compacted_)));
      watcher->end_after_first = true;
    }
  }
  ++open_watches_;
  ++watches_opened_;
  return watcher;
}

FakeKubeApi::~FakeKubeApi() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;  // open watches end
  }
  // cpp-httplib's stop() does nothing before the listen has begun: a server stopped before it
  // served anything would never stop. Wait for the listen to begin (or to have failed) first.
  while (server_ != nullptr && thread_.joinable() && !server_->is_running() && !listen_ended_) {
    std::this_thread::yield();
  }
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

bool FakeKubeApi::ServeWatch(Watcher& watcher, std::string* out, bool* drop) {
  absl::MutexLock lock(&mutex_);
  if (!watcher.first.empty()) {
    *out = std::move(watcher.first);
    watcher.first.clear();
    return !watcher.end_after_first;
  }
  auto news = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return stopping_ || drops_ != watcher.drops || expiries_ != watcher.expiries ||
           bookmarks_ != watcher.bookmark_calls ||
           (!history_.empty() && history_.back().resource_version > watcher.cursor);
  };
  // Wakes at least every 200 ms of real time to notice the deadline and the bookmark period.
  const absl::Time wake =
      std::min({absl::Now() + absl::Milliseconds(200), watcher.deadline,
                watcher.bookmarks ? watcher.next_bookmark : absl::InfiniteFuture()});
  mutex_.AwaitWithDeadline(absl::Condition(&news), wake);
  if (stopping_ || drops_ != watcher.drops) {
    *drop = true;
    return false;
  }
  if (expiries_ != watcher.expiries) {
    *out = WatchLine("ERROR", Status(410, "Expired", "the watch fell too far behind"));
    return false;
  }
  // Changes it has not been sent were compacted away: as the real server, it says so (410)
  // instead of skipping them.
  if (watcher.cursor < compacted_) {
    *out = WatchLine("ERROR", Status(410, "Expired",
                                     fmt::format("too old resource version: {} ({})",
                                                 watcher.cursor, compacted_)));
    return false;
  }
  // The history is in resourceVersion order: start after the watcher's cursor.
  const auto unsent = std::upper_bound(
      history_.begin(), history_.end(), watcher.cursor,
      [](uint64_t cursor, const Change& change) { return cursor < change.resource_version; });
  for (auto it = unsent; it != history_.end(); ++it) {
    const Change& change = *it;
    watcher.cursor = change.resource_version;
    if (change.kind != watcher.kind) continue;
    const bool was = !change.before.is_null() && watcher.Wants(change.before);
    const bool is = !change.after.is_null() && watcher.Wants(change.after);
    // A ResourceSlice goes out in the shape of the version watched.
    const auto shaped = [&](const Json& object) {
      return watcher.kind == Kind::kResourceSlice ? SliceIn(object, watcher.version) : object;
    };
    if (was && is) {
      *out += WatchLine("MODIFIED", shaped(change.after));
    } else if (is) {
      *out += WatchLine("ADDED", shaped(change.after));
    } else if (was) {
      *out += WatchLine("DELETED", shaped(change.after.is_null() ? change.before : change.after));
    }
    if (was || is) ++watch_events_[static_cast<size_t>(change.kind)];
  }
  const absl::Time now = absl::Now();
  if (watcher.bookmarks && (bookmarks_ != watcher.bookmark_calls || now >= watcher.next_bookmark)) {
    *out += WatchLine("BOOKMARK",
                      {{"kind", KindName(watcher.kind)},
                       {"apiVersion", "v1"},
                       {"metadata", {{"resourceVersion", std::to_string(resource_version_)}}}});
    watcher.cursor = std::max<uint64_t>(watcher.cursor, resource_version_);
    watcher.next_bookmark = now + kBookmarkInterval;
  }
  watcher.bookmark_calls = bookmarks_;
  return now < watcher.deadline;
}

void FakeKubeApi::Record(Kind kind, const Json& before, const Json& after) {
  history_.push_back(
      {.resource_version = resource_version_, .kind = kind, .before = before, .after = after});
}

FakeKubeApi::Answer FakeKubeApi::Handle(const KubeRequest& request) {
  if (request.authorization != "Bearer " + token_) {
    return {401, Status(401, "Unauthorized", "Unauthorized")};
  }
  if (change_before_.has_value() && change_before_->method == request.method &&
      change_before_->path == request.path) {
    ModifyNodeLocked(change_before_->node, change_before_->change);
    change_before_.reset();
  }
  if (fail_count_ > 0 && request.path.starts_with(fail_prefix_) &&
      (fail_method_.empty() || request.method == fail_method_)) {
    --fail_count_;
    const std::string reason = fail_status_ == 409   ? "Conflict"
                               : fail_status_ == 422 ? "Invalid"
                               : fail_status_ == 429 ? "TooManyRequests"
                                                     : "InternalError";
    return {fail_status_, Status(fail_status_, reason, "injected failure"), fail_retry_after_};
  }
  if (lose_count_ > 0 && request.path.starts_with(lose_prefix_) && !request.watch()) {
    --lose_count_;
    Route(request);  // done, but the answer is lost on the way back
    return {504, Status(504, "Timeout", "the answer was lost (injected)")};
  }
  return Route(request);
}

FakeKubeApi::Answer FakeKubeApi::Route(const KubeRequest& request) {
  static const std::regex node_path("/api/v1/nodes/([a-z0-9.-]+)(/status)?");
  static const std::regex events_path("/api/v1/namespaces/([a-z0-9-]+)/events");
  std::smatch match;
  if (request.path == "/api/v1/nodes") {
    if (request.method != "GET") return {405, Status(405, "MethodNotAllowed", "not allowed")};
    if (const std::string field = Param(request, "fieldSelector");
        !field.empty() && !field.starts_with(kByName)) {
      return {400, Status(400, "BadRequest",
                          fmt::format("field selector \"{}\": the fake serves metadata.name only",
                                      field))};
    }
    if (request.watch()) return WatchAnswer(request);
    return ListNodes(request);
  }
  if (std::regex_match(request.path, match, node_path)) {
    const bool status = match[2].matched;
    if (request.method == "GET") return GetNode(match[1]);
    if (request.method == "PATCH") return PatchNode(match[1], status, request);
    return {405, Status(405, "MethodNotAllowed", "the fake serves GET and PATCH of nodes")};
  }
  if (std::regex_match(request.path, match, events_path)) {
    if (request.method != "POST") return {405, Status(405, "MethodNotAllowed", "not allowed")};
    return CreateEvent(match[1], request);
  }
  static const std::regex leases_path(
      "/apis/coordination.k8s.io/v1/namespaces/([a-z0-9-]+)/leases(/([a-z0-9.-]+))?");
  if (std::regex_match(request.path, match, leases_path)) {
    return ServeLease(match[1], match[3].matched ? std::string(match[3]) : "", request);
  }
  if (request.path == "/api/v1/pods") {
    if (request.method != "GET") return {405, Status(405, "MethodNotAllowed", "not allowed")};
    if (const std::string field = Param(request, "fieldSelector");
        !field.empty() && !field.starts_with(kByNode)) {
      return {400, Status(400, "BadRequest",
                          fmt::format("field selector \"{}\": the fake serves spec.nodeName only",
                                      field))};
    }
    if (request.watch()) return WatchAnswer(request);
    return ListPods(request);
  }
  static const std::regex config_maps_path(
      "/api/v1/namespaces/([a-z0-9-]+)/configmaps(/([a-z0-9.-]+))?");
  if (std::regex_match(request.path, match, config_maps_path)) {
    return ServeConfigMap(match[1], match[3].matched ? std::string(match[3]) : "", request);
  }
  static const std::regex claims_path(
      "/apis/resource\\.k8s\\.io/(v[0-9a-z]+)/namespaces/([a-z0-9-]+)/resourceclaims(/"
      "([a-z0-9.-]+))?");
  if (std::regex_match(request.path, match, claims_path)) {
    return ServeResourceClaim(match[1], match[2], match[4].matched ? std::string(match[4]) : "",
                              request);
  }
  static const std::regex dra_path(
      "/apis/resource\\.k8s\\.io/(v[0-9a-z]+)(/([a-z]+)(/([a-z0-9.-]+))?)?");
  if (std::regex_match(request.path, match, dra_path)) {
    return ServeDra(match[1], match[3].matched ? std::string(match[3]) : "",
                    match[5].matched ? std::string(match[5]) : "", request);
  }
  static const std::regex pod_path("/api/v1/namespaces/([a-z0-9-]+)/pods/([a-z0-9.-]+)");
  if (std::regex_match(request.path, match, pod_path)) {
    if (request.method != "DELETE") return {405, Status(405, "MethodNotAllowed", "not allowed")};
    // A delete is not an eviction: no PodDisruptionBudget is consulted.
    auto pod = pods_.find({match[1].str(), match[2].str()});
    if (pod == pods_.end()) {
      return {404, Status(404, "NotFound", fmt::format("pods \"{}\" not found", match[2].str()))};
    }
    Json deleted = pod->second;
    ErasePod(pod);
    return {200, deleted};
  }
  static const std::regex eviction_path(
      "/api/v1/namespaces/([a-z0-9-]+)/pods/([a-z0-9.-]+)/eviction");
  if (std::regex_match(request.path, match, eviction_path)) {
    if (request.method != "POST") return {405, Status(405, "MethodNotAllowed", "not allowed")};
    return Evict(match[1], match[2], request);
  }
  static const std::regex event_path("/api/v1/namespaces/([a-z0-9-]+)/events/([a-z0-9.-]+)");
  if (std::regex_match(request.path, match, event_path)) {
    if (request.method != "PATCH") return {405, Status(405, "MethodNotAllowed", "not allowed")};
    return PatchEvent(match[1], match[2], request);
  }
  return {404, Status(404, "NotFound", "the server could not find the requested resource")};
}

Json FakeKubeApi::Lease(const std::string& ns, const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto it = leases_.find({ns, name});
  return it == leases_.end() ? Json() : it->second;
}

FakeKubeApi::Answer FakeKubeApi::ServeLease(const std::string& ns, const std::string& name,
                                            const KubeRequest& request) {
  auto stored = leases_.find({ns, name});
  if (request.method == "GET" && !name.empty()) {
    if (stored == leases_.end()) {
      return {404, Status(404, "NotFound",
                          fmt::format("leases.coordination.k8s.io \"{}\" not found", name))};
    }
    return {200, stored->second};
  }
  Json lease = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (!lease.is_object() || lease.value("kind", "") != "Lease" || !lease.contains("metadata") ||
      !lease["metadata"].is_object() || !lease.contains("spec")) {
    return {400, Status(400, "BadRequest", "the body must be a coordination.k8s.io/v1 Lease")};
  }
  if (request.method == "POST" && name.empty()) {
    const std::string created = lease["metadata"].value("name", "");
    if (leases_.contains({ns, created})) {
      return {409,
              Status(409, "AlreadyExists",
                     fmt::format("leases.coordination.k8s.io \"{}\" already exists", created))};
    }
    lease["metadata"]["namespace"] = ns;
    lease["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
    leases_[{ns, created}] = lease;
    return {201, lease};
  }
  if (request.method == "PUT" && !name.empty()) {
    if (stored == leases_.end()) {
      return {404, Status(404, "NotFound",
                          fmt::format("leases.coordination.k8s.io \"{}\" not found", name))};
    }
    if (lease["metadata"].value("resourceVersion", "") !=
        stored->second["metadata"].value("resourceVersion", "")) {
      return {409, Status(409, "Conflict",
                          "Operation cannot be fulfilled on leases.coordination.k8s.io \"" + name +
                              "\": the object has been modified; please apply your changes to "
                              "the latest version and try again")};
    }
    lease["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
    stored->second = lease;
    return {200, lease};
  }
  return {405, Status(405, "MethodNotAllowed", "the fake serves GET, POST and PUT of Leases")};
}

const char* FakeKubeApi::KindName(Kind kind) {
  switch (kind) {
    case Kind::kNode:
      return "Node";
    case Kind::kPod:
      return "Pod";
    case Kind::kConfigMap:
      return "ConfigMap";
    case Kind::kResourceSlice:
      return "ResourceSlice";
  }
  return "";
}

FakeKubeApi::Answer FakeKubeApi::ServeConfigMap(const std::string& ns, const std::string& name,
                                                const KubeRequest& request) {
  if (name.empty() && request.method == "GET") {
    const std::string field = Param(request, "fieldSelector");
    if (!field.empty() && !field.starts_with(kByName)) {
      return {400, Status(400, "BadRequest",
                          fmt::format("field selector \"{}\": the fake serves metadata.name only",
                                      field))};
    }
    if (request.watch()) return WatchAnswer(request);
    const std::string only = field.empty() ? "" : field.substr(kByName.size());
    Json items = Json::array();
    for (const auto& [key, config_map] : config_maps_) {
      if (key.first == ns && (only.empty() || key.second == only)) items.push_back(config_map);
    }
    return {200, Json{{"kind", "ConfigMapList"},
                      {"apiVersion", "v1"},
                      {"metadata", {{"resourceVersion", std::to_string(resource_version_)}}},
                      {"items", std::move(items)}}};
  }
  auto stored = config_maps_.find({ns, name});
  const std::string not_found = fmt::format("configmaps \"{}\" not found", name);
  if (request.method == "GET") {
    if (stored == config_maps_.end()) return {404, Status(404, "NotFound", not_found)};
    return {200, stored->second};
  }
  if (request.method == "DELETE" && !name.empty()) {
    if (stored == config_maps_.end()) return {404, Status(404, "NotFound", not_found)};
    Json deleted = stored->second;
    Bump(deleted);
    Record(Kind::kConfigMap, deleted, Json());
    config_maps_.erase(stored);
    return {200, deleted};
  }
  if ((request.method != "POST" || !name.empty()) && (request.method != "PUT" || name.empty())) {
    return {405, Status(405, "MethodNotAllowed", "the fake serves GET, POST, PUT and DELETE")};
  }
  if (request.content_type != "application/json") {
    return {415, Status(415, "UnsupportedMediaType", "create and update take application/json")};
  }
  Json config_map = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (!config_map.is_object() || config_map.value("kind", "") != "ConfigMap" ||
      config_map.value("apiVersion", "") != "v1" || !config_map.contains("metadata") ||
      !config_map["metadata"].is_object()) {
    return {400, Status(400, "BadRequest", "the body must be a v1 ConfigMap")};
  }
  Json& metadata = config_map["metadata"];
  const std::string named = metadata.value("name", "");
  if (named.empty()) return {422, Status(422, "Invalid", "metadata.name: Required value")};
  if (metadata.value("namespace", ns) != ns) {
    return {400, Status(400, "BadRequest",
                        "the namespace of the provided object does not match the namespace sent "
                        "on the request")};
  }
  const Json data = config_map.value("data", Json::object());
  for (const auto& [key, value] : data.items()) {
    if (!value.is_string()) {
      return {422, Status(422, "Invalid", fmt::format("data[{}]: must be a string", key))};
    }
  }
  metadata["namespace"] = ns;
  if (request.method == "POST") {
    if (config_maps_.contains({ns, named})) {
      return {409,
              Status(409, "AlreadyExists", fmt::format("configmaps \"{}\" already exists", named))};
    }
    metadata["uid"] = fmt::format("configmap-uid-{}", resource_version_ + 1);
    Bump(config_map);
    Record(Kind::kConfigMap, Json(), config_map);
    config_maps_[{ns, named}] = config_map;
    return {201, config_map};
  }
  if (named != name) {
    return {400, Status(400, "BadRequest", "the name of the object does not match the URL")};
  }
  if (stored == config_maps_.end()) return {404, Status(404, "NotFound", not_found)};
  // An update that names a resourceVersion must name the stored one (optimistic concurrency).
  if (const std::string version = metadata.value("resourceVersion", "");
      !version.empty() && version != stored->second["metadata"].value("resourceVersion", "")) {
    return {409, Status(409, "Conflict",
                        fmt::format("Operation cannot be fulfilled on configmaps \"{}\": the "
                                    "object has been modified; please apply your changes to the "
                                    "latest version and try again",
                                    name))};
  }
  metadata["uid"] = stored->second["metadata"]["uid"];
  const Json before = stored->second;
  Bump(config_map);
  Record(Kind::kConfigMap, before, config_map);
  stored->second = config_map;
  return {200, config_map};
}

Json FakeKubeApi::ConfigMap(const std::string& ns, const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto it = config_maps_.find({ns, name});
  return it == config_maps_.end() ? Json() : it->second;
}

void FakeKubeApi::SetConfigMap(const std::string& ns, const std::string& name, const Json& data) {
  absl::MutexLock lock(&mutex_);
  auto it = config_maps_.find({ns, name});
  const Json before = it == config_maps_.end() ? Json() : it->second;
  Json config_map = {{"kind", "ConfigMap"},
                     {"apiVersion", "v1"},
                     {"metadata",
                      {{"name", name},
                       {"namespace", ns},
                       {"uid", fmt::format("configmap-uid-{}", resource_version_ + 1)}}},
                     {"data", data}};
  if (!before.is_null()) config_map["metadata"]["uid"] = before["metadata"]["uid"];
  Bump(config_map);
  Record(Kind::kConfigMap, before, config_map);
  config_maps_[{ns, name}] = config_map;
}

void FakeKubeApi::DeleteConfigMap(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mutex_);
  auto it = config_maps_.find({ns, name});
  if (it == config_maps_.end()) return;
  Json deleted = it->second;
  Bump(deleted);
  Record(Kind::kConfigMap, deleted, Json());
  config_maps_.erase(it);
}

uint64_t FakeKubeApi::watch_events(std::string_view kind) const {
  absl::MutexLock lock(&mutex_);
  for (Kind each : {Kind::kNode, Kind::kPod, Kind::kConfigMap, Kind::kResourceSlice}) {
    if (KindName(each) == kind) return watch_events_[static_cast<size_t>(each)];
  }
  return 0;
}

void FakeKubeApi::AddPod(const Json& pod) {
  absl::MutexLock lock(&mutex_);
  const std::pair<std::string, std::string> key = {pod["metadata"]["namespace"].get<std::string>(),
                                                   pod["metadata"]["name"].get<std::string>()};
  // A pod of that name is deleted first: its replacement is a new object (a new uid).
  if (auto old = pods_.find(key); old != pods_.end()) ErasePod(old);
  Json stored = pod;
  // A UUID, as the API server's (the kubelet writes it into the pod's cgroup path).
  stored["metadata"]["uid"] = fmt::format("6f1e0c3a-1b2c-4d5e-8f90-{:012x}", ++resource_version_);
  stored["metadata"]["resourceVersion"] = std::to_string(resource_version_);
  Record(Kind::kPod, Json(), stored);
  pods_[key] = std::move(stored);
}

std::vector<Json> FakeKubeApi::Pods() const {
  absl::MutexLock lock(&mutex_);
  std::vector<Json> out;
  for (const auto& [key, pod] : pods_) out.push_back(pod);
  return out;
}

void FakeKubeApi::BlockEvictions(const std::string& ns, const std::string& name, int count) {
  absl::MutexLock lock(&mutex_);
  blocked_evictions_[{ns, name}] = count;
}

FakeKubeApi::Answer FakeKubeApi::WatchAnswer(const KubeRequest& request) {
  const std::string from = Param(request, "resourceVersion");
  if (!from.empty() && from.find_first_not_of("0123456789") != std::string::npos) {
    return {400, Status(400, "BadRequest", fmt::format("invalid resource version: {}", from))};
  }
  return {0, Json()};
}

void FakeKubeApi::ErasePod(std::map<std::pair<std::string, std::string>, Json>::iterator pod) {
  Json deleted = pod->second;
  Bump(deleted);  // the DELETED event carries the deletion's resourceVersion
  Record(Kind::kPod, deleted, Json());
  pods_.erase(pod);
}

bool FakeKubeApi::RemovePod(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&mutex_);
  auto pod = pods_.find({ns, name});
  if (pod == pods_.end()) return false;
  ErasePod(pod);
  return true;
}

FakeKubeApi::Answer FakeKubeApi::ListPods(const KubeRequest& request) {
  const std::string field = Param(request, "fieldSelector");
  const std::string node = field.starts_with(kByNode) ? field.substr(kByNode.size()) : "";
  Json items = Json::array();
  for (const auto& [key, pod] : pods_) {
    if (!node.empty() && pod["spec"].value("nodeName", "") != node) continue;
    if (!Selected(pod, Param(request, "labelSelector"))) continue;
    items.push_back(pod);
  }
  return {200, Json{{"kind", "PodList"},
                    {"apiVersion", "v1"},
                    {"metadata", {{"resourceVersion", std::to_string(resource_version_)}}},
                    {"items", std::move(items)}}};
}

FakeKubeApi::Answer FakeKubeApi::Evict(const std::string& ns, const std::string& name,
                                       const KubeRequest& request) {
  const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || body.value("apiVersion", "") != "policy/v1" ||
      body.value("kind", "") != "Eviction" || !body.contains("metadata") ||
      body["metadata"].value("name", "") != name || body["metadata"].value("namespace", "") != ns) {
    return {400, Status(400, "BadRequest",
                        "the body must be a policy/v1 Eviction naming the pod and its namespace")};
  }
  auto pod = pods_.find({ns, name});
  if (pod == pods_.end()) {
    return {404, Status(404, "NotFound", fmt::format("pods \"{}\" not found", name))};
  }
  if (int& blocked = blocked_evictions_[{ns, name}]; blocked > 0) {
    --blocked;
    return {429,
            Status(429, "TooManyRequests",
                   "Cannot evict pod as it would violate the pod's disruption budget."),
            /*retry_after=*/0};
  }
  ErasePod(pod);
  return {201, Json{{"kind", "Status"},
                    {"apiVersion", "v1"},
                    {"metadata", Json::object()},
                    {"status", "Success"},
                    {"code", 201}}};
}

FakeKubeApi::Answer FakeKubeApi::GetNode(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    return {404, Status(404, "NotFound", fmt::format("nodes \"{}\" not found", name))};
  }
  return {200, it->second};
}

FakeKubeApi::Answer FakeKubeApi::ListNodes(const KubeRequest& request) {
  const std::string selector = Param(request, "labelSelector");
  const std::string field = Param(request, "fieldSelector");
  const std::string only = field.starts_with(kByName) ? field.substr(kByName.size()) : "";
  size_t limit = std::numeric_limits<size_t>::max();
  if (const std::string text = Param(request, "limit"); !text.empty()) {
    limit = std::strtoull(text.c_str(), nullptr, 10);
    if (limit == 0) limit = std::numeric_limits<size_t>::max();
  }
  // A continue token: the list's resourceVersion and the last name served ("1234/node-9").
  uint64_t list_version = resource_version_;
  std::string after;
  if (const std::string token = Param(request, "continue"); !token.empty()) {
    const size_t slash = token.find('/');
    if (slash == std::string::npos) {
      return {400, Status(400, "BadRequest", "continue key is not valid")};
    }
    list_version = std::strtoull(token.substr(0, slash).c_str(), nullptr, 10);
    after = token.substr(slash + 1);
    if (list_version < compacted_) {
      return {410, Status(410, "Expired",
                          "The provided continue parameter is too old to display a consistent "
                          "list result. You can start a new list without the continue parameter.")};
    }
  }
  Json list = {{"kind", "NodeList"},
               {"apiVersion", "v1"},
               {"metadata", {{"resourceVersion", std::to_string(list_version)}}},
               {"items", Json::array()}};
  for (auto it = after.empty() ? nodes_.begin() : nodes_.upper_bound(after); it != nodes_.end();
       ++it) {
    const Json& node = it->second;
    if (!Selected(node, selector) || (!only.empty() && it->first != only)) continue;
    if (list["items"].size() == limit) {
      list["metadata"]["continue"] = fmt::format(
          "{}/{}", list_version, list["items"].back()["metadata"]["name"].get<std::string>());
      break;
    }
    list["items"].push_back(node);
  }
  return {200, list};
}

FakeKubeApi::Answer FakeKubeApi::PatchNode(const std::string& name, bool status_subresource,
                                           const KubeRequest& request) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    return {404, Status(404, "NotFound", fmt::format("nodes \"{}\" not found", name))};
  }
  const Json patch = Json::parse(request.body, nullptr, false);
  if (patch.is_discarded()) return {400, Status(400, "BadRequest", "the body is not JSON")};
  // A merge patch that names a resourceVersion is a precondition, as the real server applies
  // it: the object must still be at that version.
  if (patch.is_object() && patch.contains("metadata") && patch["metadata"].is_object() &&
      patch["metadata"].contains("resourceVersion") &&
      patch["metadata"]["resourceVersion"] != it->second["metadata"]["resourceVersion"]) {
    return {409, Status(409, "Conflict",
                        fmt::format("Operation cannot be fulfilled on nodes \"{}\": the object "
                                    "has been modified; please apply your changes to the latest "
                                    "version and try again",
                                    name))};
  }
  Json patched;
  if (request.content_type == "application/strategic-merge-patch+json") {
    if (!patch.is_object()) return {400, Status(400, "BadRequest", "not a JSON object")};
    patched = StrategicMerge(it->second, patch);
  } else if (request.content_type == "application/merge-patch+json") {
    patched = it->second;
    patched.merge_patch(patch);
  } else if (request.content_type == "application/json-patch+json") {
    if (!patch.is_array()) return {400, Status(400, "BadRequest", "a JSON patch is an array")};
    try {
      patched = it->second.patch(patch);
    } catch (const Json::exception& error) {
      // What the real server answers when a `test` fails or a path does not exist.
      return {422, Status(422, "Invalid", error.what())};
    }
  } else {
    return {415, Status(415, "UnsupportedMediaType",
                        fmt::format("the body of the request was in an unknown format - "
                                    "accepted media types include: application/json-patch+json, "
                                    "application/merge-patch+json, "
                                    "application/strategic-merge-patch+json (got '{}')",
                                    request.content_type))};
  }
  if (patched.contains("status") && patched["status"].contains("conditions")) {
    for (const Json& condition : patched["status"]["conditions"]) {
      for (const char* field : {"lastHeartbeatTime", "lastTransitionTime"}) {
        if (condition.contains(field) && !IsKubeTime(condition[field])) {
          return {400, Status(400, "BadRequest", fmt::format("{}: not an RFC 3339 time", field))};
        }
      }
    }
  }
  // The status subresource changes only status; the main resource never changes status.
  Json updated = it->second;
  if (status_subresource) {
    updated["status"] = patched["status"];
  } else {
    updated = patched;
    updated["status"] = it->second["status"];
    updated["metadata"]["resourceVersion"] = it->second["metadata"]["resourceVersion"];
  }
  if (const std::string invalid = ValidateNode(updated); !invalid.empty()) {
    return {422, Status(422, "Invalid", fmt::format("Node \"{}\" is invalid: {}", name, invalid))};
  }
  if (updated != it->second) {
    Changed(it->second, updated);
  }
  it->second = updated;
  return {200, updated};
}

FakeKubeApi::Answer FakeKubeApi::PatchEvent(const std::string& ns, const std::string& name,
                                            const KubeRequest& request) {
  if (request.content_type != "application/strategic-merge-patch+json" &&
      request.content_type != "application/merge-patch+json") {
    return {415, Status(415, "UnsupportedMediaType", "a patch needs a patch content type")};
  }
  const Json patch = Json::parse(request.body, nullptr, false);
  if (!patch.is_object()) return {400, Status(400, "BadRequest", "the patch is not an object")};
  for (Json& event : events_) {
    if (event["metadata"].value("name", "") != name ||
        event["metadata"].value("namespace", "") != ns) {
      continue;
    }
    event.merge_patch(patch);  // an Event has no list a strategic merge would treat otherwise
    event["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
    return {200, event};
  }
  return {404, Status(404, "NotFound", fmt::format("events \"{}\" not found", name))};
}

FakeKubeApi::Answer FakeKubeApi::CreateEvent(const std::string& ns, const KubeRequest& request) {
  if (request.content_type != "application/json") {
    return {415, Status(415, "UnsupportedMediaType", "create takes application/json")};
  }
  Json event = Json::parse(request.body, nullptr, false);
  if (!event.is_object() || event.value("kind", "") != "Event" ||
      event.value("apiVersion", "") != "v1") {
    return {400, Status(400, "BadRequest", "not a v1 Event")};
  }
  Json& metadata = event["metadata"];
  if (metadata.contains("namespace") && metadata["namespace"] != ns) {
    return {400, Status(400, "BadRequest",
                        "the namespace of the provided object does not match the namespace sent "
                        "on the request")};
  }
  if (metadata.value("name", "").empty() && metadata.value("generateName", "").empty()) {
    return {422, Status(422, "Invalid",
                        "metadata.name: Required value: name or generateName is "
                        "required")};
  }
  const Json& involved = event.value("involvedObject", Json::object());
  if (involved.value("kind", "").empty() || involved.value("name", "").empty()) {
    return {422, Status(422, "Invalid", "involvedObject: Required value")};
  }
  const std::string type = event.value("type", "");
  if (type != "Normal" && type != "Warning") {
    return {422, Status(422, "Invalid", fmt::format("type: Unsupported value: \"{}\"", type))};
  }
  if (event.value("reason", "").empty()) {
    return {422, Status(422, "Invalid", "reason: Required value")};
  }
  if (metadata.value("name", "").empty()) {
    metadata["name"] = metadata["generateName"].get<std::string>() + std::to_string(events_.size());
  }
  for (const Json& existing : events_) {
    if (existing["metadata"]["name"] == metadata["name"]) {
      return {409, Status(409, "AlreadyExists", "events already exists")};
    }
  }
  metadata["namespace"] = ns;
  metadata["resourceVersion"] = std::to_string(++resource_version_);
  events_.push_back(event);
  return {201, event};
}

void FakeKubeApi::Bump(Json& node) {
  node["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
}

void FakeKubeApi::Changed(const Json& before, Json& node) {
  Bump(node);
  Record(Kind::kNode, before, node);
}

void FakeKubeApi::ModifyNodeLocked(const std::string& name,
                                   const std::function<void(Json&)>& change) {
  Json& node = nodes_.at(name);
  const Json before = node;
  change(node);
  Changed(before, node);
}

void FakeKubeApi::AddNode(const std::string& name, const std::map<std::string, std::string>& labels,
                          const Json& taints, const Json& annotations) {
  absl::MutexLock lock(&mutex_);
  Json node = {
      {"kind", "Node"},
      {"apiVersion", "v1"},
      {"metadata", {{"name", name}, {"uid", fmt::format("uid-{}", name)}, {"labels", labels}}},
      {"spec", Json::object()},
      {"status",
       {{"conditions", Json::array({{{"type", "Ready"},
                                     {"status", "True"},
                                     {"reason", "KubeletReady"},
                                     {"lastTransitionTime", "2026-01-01T00:00:00Z"}}})}}}};
  if (!taints.empty()) node["spec"]["taints"] = taints;
  if (!annotations.is_null()) node["metadata"]["annotations"] = annotations;
  Changed(nodes_.contains(name) ? nodes_[name] : Json(), node);
  nodes_[name] = node;
}

Json FakeKubeApi::Node(const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto it = nodes_.find(name);
  return it == nodes_.end() ? Json() : it->second;
}

void FakeKubeApi::ModifyNode(const std::string& name, const std::function<void(Json&)>& change) {
  absl::MutexLock lock(&mutex_);
  ModifyNodeLocked(name, change);
}

void FakeKubeApi::DeleteNode(const std::string& name) {
  absl::MutexLock lock(&mutex_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  Json deleted = it->second;
  Bump(deleted);  // the DELETED event carries the deletion's resourceVersion
  Record(Kind::kNode, deleted, Json());
  nodes_.erase(it);
}

int FakeKubeApi::open_watches() const {
  absl::MutexLock lock(&mutex_);
  return open_watches_;
}

int FakeKubeApi::watches_opened() const {
  absl::MutexLock lock(&mutex_);
  return watches_opened_;
}

void FakeKubeApi::Bookmark() {
  absl::MutexLock lock(&mutex_);
  ++bookmarks_;
}

void FakeKubeApi::DropWatches() {
  absl::MutexLock lock(&mutex_);
  ++drops_;
}

void FakeKubeApi::ExpireWatches() {
  absl::MutexLock lock(&mutex_);
  ++expiries_;
}

void FakeKubeApi::Compact() {
  absl::MutexLock lock(&mutex_);
  compacted_ = resource_version_;
  history_.clear();
}

std::string FakeKubeApi::resource_version() const {
  absl::MutexLock lock(&mutex_);
  return std::to_string(resource_version_);
}

std::vector<Json> FakeKubeApi::Events() const {
  absl::MutexLock lock(&mutex_);
  return events_;
}

std::vector<KubeRequest> FakeKubeApi::Requests() const {
  absl::MutexLock lock(&mutex_);
  return requests_;
}

void FakeKubeApi::ClearRequests() {
  absl::MutexLock lock(&mutex_);
  requests_.clear();
}

void FakeKubeApi::SetToken(const std::string& token) {
  absl::MutexLock lock(&mutex_);
  token_ = token;
}

void FakeKubeApi::FailNext(int status, int count, const std::string& path_prefix, int retry_after,
                           const std::string& method) {
  absl::MutexLock lock(&mutex_);
  fail_status_ = status;
  fail_count_ = count;
  fail_prefix_ = path_prefix;
  fail_method_ = method;
  fail_retry_after_ = retry_after;
}

void FakeKubeApi::LoseAnswers(int count, const std::string& path_prefix) {
  absl::MutexLock lock(&mutex_);
  lose_count_ = count;
  lose_prefix_ = path_prefix;
}

void FakeKubeApi::ChangeBefore(const std::string& method, const std::string& path,
                               const std::string& node, std::function<void(Json&)> change) {
  absl::MutexLock lock(&mutex_);
  change_before_ = ChangeBeforeRequest{method, path, node, std::move(change)};
}

void FakeKubeApi::SetDelay(absl::Duration delay) {
  absl::MutexLock lock(&mutex_);
  delay_ = delay;
}

}  // namespace vigil::testing

namespace vigil::testing {

Json GpuSlice(const std::string& node, const Json& devices) {
  return Json{{"metadata", {{"name", node + "-gpu.nvidia.com-x7k2p"}}},
              {"spec",
               {{"driver", "gpu.nvidia.com"},
                {"nodeName", node},
                {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
                {"devices", devices}}}};
}

void FakeKubeApi::ServeDraVersions(std::vector<std::string> slice_versions,
                                   std::vector<std::string> rule_versions) {
  absl::MutexLock lock(&mutex_);
  slice_versions_ = std::move(slice_versions);
  rule_versions_ = std::move(rule_versions);
}

void FakeKubeApi::AddResourceSlice(const Json& slice) {
  absl::MutexLock lock(&mutex_);
  Json stored = slice;
  stored["apiVersion"] = "resource.k8s.io/v1";
  stored["kind"] = "ResourceSlice";
  const std::string name = stored["metadata"]["name"].get<std::string>();
  stored["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
  auto existing = resource_slices_.find(name);
  Record(Kind::kResourceSlice, existing == resource_slices_.end() ? Json() : existing->second,
         stored);
  resource_slices_[name] = std::move(stored);
}

std::vector<Json> FakeKubeApi::DeviceTaintRules() const {
  absl::MutexLock lock(&mutex_);
  std::vector<Json> out;
  for (const auto& [name, rule] : device_taint_rules_) out.push_back(rule);
  return out;
}

FakeKubeApi::Answer FakeKubeApi::ServeDra(const std::string& version, const std::string& resource,
                                          const std::string& name, const KubeRequest& request) {
  const auto serves = [&](const std::vector<std::string>& versions) {
    return std::find(versions.begin(), versions.end(), version) != versions.end();
  };
  const bool slices = serves(slice_versions_);
  const bool rules = serves(rule_versions_);
  const Answer not_found = {
      404, Status(404, "NotFound", "the server could not find the requested resource")};
  if (resource.empty()) {  // discovery
    if ((!slices && !rules) || request.method != "GET") return not_found;
    Json resources = Json::array();
    if (slices) {
      resources.push_back({{"name", "resourceclaims"},
                           {"singularName", "resourceclaim"},
                           {"namespaced", true},
                           {"kind", "ResourceClaim"},
                           {"verbs", {"create", "delete", "get", "list", "update", "watch"}}});
      resources.push_back({{"name", "resourceslices"},
                           {"singularName", "resourceslice"},
                           {"namespaced", false},
                           {"kind", "ResourceSlice"},
                           {"verbs", {"create", "delete", "get", "list", "update", "watch"}}});
    }
    if (rules) {
      resources.push_back({{"name", "devicetaintrules"},
                           {"singularName", "devicetaintrule"},
                           {"namespaced", false},
                           {"kind", "DeviceTaintRule"},
                           {"verbs", {"create", "delete", "get", "list", "update", "watch"}}});
    }
    return {200, Json{{"kind", "APIResourceList"},
                      {"apiVersion", "v1"},
                      {"groupVersion", "resource.k8s.io/" + version},
                      {"resources", std::move(resources)}}};
  }
  if (resource == "devicetaintrules") {
    if (!rules) return not_found;
    return ServeDeviceTaintRule(version, name, request);
  }
  if (resource != "resourceslices" || !slices) return not_found;
  if (!name.empty()) {
    if (request.method != "GET") return {405, Status(405, "MethodNotAllowed", "not allowed")};
    auto it = resource_slices_.find(name);
    if (it == resource_slices_.end()) {
      return {404, Status(404, "NotFound",
                          fmt::format("resourceslices.resource.k8s.io \"{}\" not found", name))};
    }
    return {200, SliceIn(it->second, version)};
  }
  if (request.method != "GET") return {405, Status(405, "MethodNotAllowed", "not allowed")};
  const std::string field = Param(request, "fieldSelector");
  std::string field_name, field_value;
  if (!field.empty()) {
    const size_t equals = field.find('=');
    field_name = field.substr(0, equals);
    field_value = equals == std::string::npos ? "" : field.substr(equals + 1);
    if (field_name != "spec.nodeName" && field_name != "spec.driver" &&
        field_name != "metadata.name") {
      return {400,
              Status(400, "BadRequest", fmt::format("field label not supported: {}", field_name))};
    }
  }
  if (request.watch()) return WatchAnswer(request);
  Json items = Json::array();
  for (const auto& [key, slice] : resource_slices_) {
    if (!field_name.empty() && FieldValue(slice, field_name) != field_value) continue;
    if (!Selected(slice, Param(request, "labelSelector"))) continue;
    items.push_back(SliceIn(slice, version));
  }
  return {200, Json{{"kind", "ResourceSliceList"},
                    {"apiVersion", "resource.k8s.io/" + version},
                    {"metadata", {{"resourceVersion", std::to_string(resource_version_)}}},
                    {"items", std::move(items)}}};
}

void FakeKubeApi::AddResourceClaim(const Json& claim) {
  absl::MutexLock lock(&mutex_);
  Json stored = claim;
  stored["apiVersion"] = "resource.k8s.io/v1";
  stored["kind"] = "ResourceClaim";
  stored["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
  stored["metadata"]["uid"] = fmt::format("claim-uid-{}", resource_version_);
  std::pair<std::string, std::string> key = {stored["metadata"].value("namespace", ""),
                                             stored["metadata"].value("name", "")};
  resource_claims_[std::move(key)] = std::move(stored);
}

FakeKubeApi::Answer FakeKubeApi::ServeResourceClaim(const std::string& version,
                                                    const std::string& ns, const std::string& name,
                                                    const KubeRequest& request) {
  if (std::find(slice_versions_.begin(), slice_versions_.end(), version) == slice_versions_.end()) {
    return {404, Status(404, "NotFound", "the server could not find the requested resource")};
  }
  if (request.method != "GET") return {405, Status(405, "MethodNotAllowed", "not allowed")};
  const auto served = [&](Json claim) {
    claim["apiVersion"] = "resource.k8s.io/" + version;
    return claim;
  };
  if (!name.empty()) {
    auto it = resource_claims_.find({ns, name});
    if (it == resource_claims_.end()) {
      return {404, Status(404, "NotFound",
                          fmt::format("resourceclaims.resource.k8s.io \"{}\" not found", name))};
    }
    return {200, served(it->second)};
  }
  Json items = Json::array();
  for (const auto& [key, claim] : resource_claims_) {
    if (key.first == ns) items.push_back(served(claim));
  }
  return {200, Json{{"kind", "ResourceClaimList"},
                    {"apiVersion", "resource.k8s.io/" + version},
                    {"metadata", {{"resourceVersion", std::to_string(resource_version_)}}},
                    {"items", std::move(items)}}};
}

FakeKubeApi::Answer FakeKubeApi::ServeDeviceTaintRule(const std::string& version,
                                                      const std::string& name,
                                                      const KubeRequest& request) {
  const std::string kind = "devicetaintrules.resource.k8s.io";
  if (request.method == "GET" && name.empty()) {
    Json items = Json::array();
    for (const auto& [key, rule] : device_taint_rules_) {
      if (!Selected(rule, Param(request, "labelSelector"))) continue;
      Json served = rule;
      served["apiVersion"] = "resource.k8s.io/" + version;
      items.push_back(std::move(served));
    }
    return {200, Json{{"kind", "DeviceTaintRuleList"},
                      {"apiVersion", "resource.k8s.io/" + version},
                      {"metadata", {{"resourceVersion", std::to_string(resource_version_)}}},
                      {"items", std::move(items)}}};
  }
  auto stored = device_taint_rules_.find(name);
  if (!name.empty() && (request.method == "GET" || request.method == "DELETE")) {
    if (stored == device_taint_rules_.end()) {
      return {404, Status(404, "NotFound", fmt::format("{} \"{}\" not found", kind, name))};
    }
    Json rule = stored->second;
    rule["apiVersion"] = "resource.k8s.io/" + version;
    if (request.method == "DELETE") device_taint_rules_.erase(stored);
    return {200, rule};
  }
  if (request.method != "POST" || !name.empty()) {
    return {405, Status(405, "MethodNotAllowed", "the fake serves POST, GET, list and DELETE")};
  }
  Json rule = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (!rule.is_object() || rule.value("kind", "") != "DeviceTaintRule" ||
      rule.value("apiVersion", "") != "resource.k8s.io/" + version || !rule.contains("metadata") ||
      !rule["metadata"].is_object()) {
    return {400, Status(400, "BadRequest",
                        "the body must be a resource.k8s.io/" + version + " DeviceTaintRule")};
  }
  std::string created = rule["metadata"].value("name", "");
  if (created.empty() && rule["metadata"].contains("generateName")) {
    created = rule["metadata"]["generateName"].get<std::string>() +
              fmt::format("{:05x}", ++generated_names_);
  }
  // The API's validation of the fields a DeviceTaintRule carries (validateDeviceTaint).
  std::vector<std::string> errors;
  if (created.empty())
    errors.push_back("metadata.name: Required value: name or generateName is required");
  if (!created.empty() && !IsDnsSubdomain(created)) {
    errors.push_back(fmt::format(
        "metadata.name: Invalid value: \"{}\": a lowercase RFC 1123 subdomain", created));
  }
  const Json spec = rule.value("spec", Json::object());
  const Json taint = spec.value("taint", Json());
  if (!taint.is_object()) {
    errors.push_back("spec.taint: Required value");
  } else {
    const std::string key = taint.value("key", "");
    const std::string value = taint.value("value", "");
    const std::string effect = taint.value("effect", "");
    if (!IsQualifiedName(key)) {
      errors.push_back(
          fmt::format("spec.taint.key: Invalid value: \"{}\": name part must consist of "
                      "alphanumeric characters, '-', '_' or '.'",
                      key));
    }
    if (!IsLabelValue(value)) {
      errors.push_back(
          fmt::format("spec.taint.value: Invalid value: \"{}\": a valid label must be an empty "
                      "string or consist of alphanumeric characters, '-', '_' or '.'",
                      value));
    }
    if (effect.empty()) {
      errors.push_back("spec.taint.effect: Required value");
    } else if (effect != "NoSchedule" && effect != "NoExecute" && effect != "None") {
      errors.push_back(
          fmt::format("spec.taint.effect: Unsupported value: \"{}\": supported values: "
                      "\"NoExecute\", \"NoSchedule\", \"None\"",
                      effect));
    }
  }
  if (const Json selector = spec.value("deviceSelector", Json()); selector.is_object()) {
    for (const char* field : {"driver", "pool", "device"}) {
      if (!selector.contains(field)) continue;
      const Json& value = selector[field];
      if (!value.is_string() || !IsDnsSubdomain(value.get<std::string>())) {
        errors.push_back(
            fmt::format("spec.deviceSelector.{}: Invalid value: {}", field, value.dump()));
      }
    }
  }
  if (!errors.empty()) {
    std::string message =
        fmt::format("DeviceTaintRule.resource.k8s.io \"{}\" is invalid: [", created);
    for (size_t i = 0; i < errors.size(); ++i) message += (i > 0 ? ", " : "") + errors[i];
    return {422, Status(422, "Invalid", message + "]")};
  }
  if (device_taint_rules_.contains(created)) {
    return {409,
            Status(409, "AlreadyExists", fmt::format("{} \"{}\" already exists", kind, created))};
  }
  rule["metadata"]["name"] = created;
  rule["metadata"].erase("generateName");
  rule["metadata"]["uid"] = fmt::format("rule-uid-{}", resource_version_ + 1);
  rule["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
  if (!rule["spec"]["taint"].contains("timeAdded")) {
    rule["spec"]["taint"]["timeAdded"] =
        absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  }
  device_taint_rules_[created] = rule;
  return {201, rule};
}

}  // namespace vigil::testing

// A fake Kubernetes API server for tests: HTTPS on 127.0.0.1 with a self-signed certificate,
// serving the few Node and Event endpoints the health check uses, and checking requests the way
// the real one does — bearer token (401), paths and verbs (404/405), patch content types (415),
// strategic-merge patches of nodes/NAME/status (conditions merged by type, only status kept),
// JSON patches (RFC 6902, a failed `test` is 422 like the real server's), taint and Event
// validation (422), namespaces (400), resourceVersion bumped on every write. Nodes are listed with
// label selectors and pagination (limit / continue) and watched as the real server streams a
// watch: chunked JSON lines of ADDED / MODIFIED / DELETED (an object entering or leaving the
// selector is ADDED / DELETED), BOOKMARK (allowWatchBookmarks) and ERROR (a Status; 410 Expired
// for a resourceVersion older than the history kept), resumed from any resourceVersion still in
// its history, ended after timeoutSeconds; a node's watch may name it (fieldSelector
// metadata.name, as the kubelet watches its own); pods are listed and watched the same way, across
// namespaces, with fieldSelector spec.nodeName; ConfigMaps per namespace, by metadata.name. It
// records every request, and can be told to answer the next requests with an error (409, 500...) or
// slowly, to drop or expire open watches, and to forget its history (compaction). Thread-safety:
// every method may be called from any thread (one mutex); handlers run on the server's threads (a
// pool of `threads`, one per open watch).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace httplib {
class SSLServer;
struct Request;
struct Response;
}  // namespace httplib

namespace vigil::testing {

struct KubeRequest {
  std::string method, path, content_type, authorization, user_agent, body;
  std::map<std::string, std::string> params;  // the query, decoded
  absl::Time received;                        // when it arrived (real time)
  bool watch() const { return params.contains("watch"); }
  bool list() const { return method == "GET" && path == "/api/v1/nodes" && !watch(); }
  bool pods_list() const { return method == "GET" && path == "/api/v1/pods" && !watch(); }
};

// What tests and benchmarks look at on the fake's nodes: the status and the message of the
// condition `type` ("" when the node has none), and whether the node carries a NoSchedule taint
// with `key`.
std::string ConditionStatus(const nlohmann::json& node, const std::string& type);
std::string ConditionMessage(const nlohmann::json& node, const std::string& type);
bool HasNoScheduleTaint(const nlohmann::json& node, const std::string& key);

// A ResourceSlice of NVIDIA's DRA driver (gpu.nvidia.com) for `node` (its pool), v1 shape, with
// `devices` ({"name", "attributes"} each).
nlohmann::json GpuSlice(const std::string& node, const nlohmann::json& devices);

// A self-signed certificate for 127.0.0.1 (made with the openssl command), its key, and a
// service-account directory (token, ca.crt, namespace) as a pod would have it mounted.
struct KubeCredentials {
  std::string cert_path, key_path, service_account_dir, token;
};
// Writes them under `dir`; empty paths when openssl failed (the error is in `*error`).
KubeCredentials MakeKubeCredentials(const std::string& dir, std::string* error);

class FakeKubeApi {
 public:
  // `threads`: the server's pool; each open watch holds one.
  explicit FakeKubeApi(const KubeCredentials& credentials, int threads = 16);
  ~FakeKubeApi();

  // Makes credentials under `dir`, starts a server with them, and points this process's
  // in-cluster environment (KUBERNETES_SERVICE_HOST and _PORT, inherited by the daemons a test
  // starts) at it. Null, with `*error` saying why, when it could not.
  static std::unique_ptr<FakeKubeApi> Start(const std::string& dir, std::string* error,
                                            int threads = 16);
  const KubeCredentials& credentials() const { return credentials_; }

  // 0 when it could not start.
  int port() const { return port_; }

  // A node with these labels and (optionally) taints and annotations.
  void AddNode(const std::string& name, const std::map<std::string, std::string>& labels,
               const nlohmann::json& taints = nlohmann::json::array(),
               const nlohmann::json& annotations = nullptr);
  nlohmann::json Node(const std::string& name) const;
  // Changes a node as another client would (bumps its resourceVersion).
  void ModifyNode(const std::string& name, const std::function<void(nlohmann::json&)>& change);
  void DeleteNode(const std::string& name);

  // Pods, as the drain and the exporter's pod_uid see them: `pod` is the object
  // (metadata.namespace and .name, spec.nodeName, containers with their resources,
  // ownerReferences, the mirror annotation, labels, matched by labelSelector); the fake gives it a
  // UUID for its uid and a resourceVersion (a pod added again under its name is deleted and added
  // anew, with a new uid, as a StatefulSet recreates one). Listed and watched with fieldSelector
  // spec.nodeName=NODE (the only field selector the fake serves, for pods); evicted through POST
  // .../pods/NAME/eviction with a policy/v1 Eviction: 201 and the pod gone, 404 when it is gone
  // already, 429 while a PodDisruptionBudget forbids (BlockEvictions), 400 for a body that is not
  // an Eviction of that pod; deleted with DELETE .../pods/NAME (200, 404 when gone), which no
  // PodDisruptionBudget holds up.
  void AddPod(const nlohmann::json& pod);
  // The pod is gone (deleted by another client); false when there was none.
  bool RemovePod(const std::string& ns, const std::string& name);
  std::vector<nlohmann::json> Pods() const;
  // The next `count` evictions of pod NS/NAME answer 429, as while a PDB allows no disruption.
  void BlockEvictions(const std::string& ns, const std::string& name, int count);

  // ConfigMaps (the remediator's published circuit breaker): created with POST (409
  // AlreadyExists), read with GET (404), replaced with PUT (404 when none; 409 Conflict when the
  // body names a resourceVersion that is not the stored one), deleted with DELETE; listed and
  // watched per namespace with fieldSelector metadata.name=NAME. Data values must be strings
  // (422). ConfigMap() is null when there is none; SetConfigMap() and DeleteConfigMap() change
  // one as another client would.
  nlohmann::json ConfigMap(const std::string& ns, const std::string& name) const;
  void SetConfigMap(const std::string& ns, const std::string& name, const nlohmann::json& data);
  void DeleteConfigMap(const std::string& ns, const std::string& name);

  // resource.k8s.io (DRA), in the versions a release serves, per resource (default: Kubernetes
  // 1.37's, ResourceSlices in v1, v1beta2 and v1beta1, DeviceTaintRules in v1, v1beta2 and
  // v1alpha3; 1.36 serves DeviceTaintRules in v1beta2 and v1alpha3 only). Discovery:
  // GET /apis/resource.k8s.io/VERSION is an APIResourceList of what that version serves, 404 for
  // a version serving neither; a resource asked in a version that does not serve it is 404.
  void ServeDraVersions(std::vector<std::string> slice_versions,
                        std::vector<std::string> rule_versions);
  // A ResourceSlice (cluster-scoped), given in the v1 shape (spec.devices[].attributes): served
  // in each version's shape (v1beta1: attributes under `basic`), listed and watched with
  // fieldSelector spec.nodeName or spec.driver (400 for another field, as the real server).
  void AddResourceSlice(const nlohmann::json& slice);
  // DeviceTaintRules (cluster-scoped): created with POST (generateName honoured; 409 when the name
  // exists; 422 with the API's field errors for a rule its validation refuses: no spec.taint, a
  // key that is not a qualified name, a value that is not a label value, an effect other than
  // NoSchedule, NoExecute or None, a selector field that is not a valid name; 400 for a body that
  // is not a DeviceTaintRule of the version asked), read with GET (404), listed with
  // labelSelector, deleted with DELETE (404 when gone). timeAdded is set when not given.
  std::vector<nlohmann::json> DeviceTaintRules() const;
  // A ResourceClaim (namespaced), given in the v1 shape (status.allocation.devices.results[] of
  // driver, pool, device): served in the ResourceSlices' versions, read with GET (404 when none)
  // and listed per namespace. A claim added again under its name replaces it.
  void AddResourceClaim(const nlohmann::json& claim);

  // Watch events (ADDED / MODIFIED / DELETED, not bookmarks) sent to watchers since the start, of
  // one kind: "Node", "Pod", "ConfigMap" or "ResourceSlice". One change sent to N watchers counts
  // N: the fan-out.
  uint64_t watch_events(std::string_view kind) const;

  // coordination.k8s.io/v1 Leases: created with POST (409 AlreadyExists when there is one),
  // read with GET (404 when none), replaced with PUT only with the resourceVersion last read
  // (409 Conflict otherwise), as the real server does for optimistic concurrency.
  nlohmann::json Lease(const std::string& ns, const std::string& name) const;

  // Watches. Open ones now, and opened since the start.
  int open_watches() const;
  int watches_opened() const;
  // Sends a BOOKMARK with the current resourceVersion to every open watch that allows them
  // (the real server, and the fake, send one about every minute anyway).
  void Bookmark();
  // Drops every open watch's connection without ending its body (a dead load balancer).
  void DropWatches();
  // Ends every open watch with an ERROR event carrying a 410 Expired Status, as the server does
  // for a watcher that fell too far behind.
  void ExpireWatches();
  // Forgets the history of changes up to now (etcd compaction): a watch or a continue token from
  // an older resourceVersion gets 410.
  void Compact();
  // The current resourceVersion.
  std::string resource_version() const;
  std::vector<nlohmann::json> Events() const;
  std::vector<KubeRequest> Requests() const;
  void ClearRequests();
  // The token the server accepts from now on (a rotated service account token).
  void SetToken(const std::string& token);
  // Answers the next `count` requests whose path starts with `path_prefix` (and, when given,
  // whose method is `method`) with `status` (a Kubernetes Status body) without acting on them.
  // With `retry_after` > 0, the answers carry Retry-After: that many seconds (as API Priority and
  // Fairness sends with a 429).
  void FailNext(int status, int count = 1, const std::string& path_prefix = "", int retry_after = 0,
                const std::string& method = "");
  // Carries out the next `count` requests whose path starts with `path_prefix`, then answers
  // 504 as a proxy that lost the answer would: the client cannot tell it was done.
  void LoseAnswers(int count, const std::string& path_prefix);
  // Just before the next `method` request to exactly `path`, changes node `node` as another
  // client would (bumping its resourceVersion): a race between our read and our write.
  void ChangeBefore(const std::string& method, const std::string& path, const std::string& node,
                    std::function<void(nlohmann::json&)> change);
  // Delays every answer by `delay` (an API server under load).
  void SetDelay(absl::Duration delay);

 private:
  struct Answer {
    int status;  // 0: a watch, to be streamed
    nlohmann::json body;
    int retry_after = 0;  // seconds; 0: no header
  };
  // Checks the token and injected failures, then routes.
  Answer Handle(const KubeRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer Route(const KubeRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer GetNode(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer ListNodes(const KubeRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The collections the fake can watch.
  enum class Kind : uint8_t { kNode, kPod, kConfigMap, kResourceSlice };
  static const char* KindName(Kind kind);
  struct Watcher;
  // Waits for what the watcher should be sent next and writes it; false ends the stream
  // (`*drop`: without the final chunk, a broken connection).
  bool ServeWatch(Watcher& watcher, std::string* out, bool* drop);
  // One HTTP request on an httplib thread: recorded, answered, or streamed as a watch.
  void Serve(const char* method, const httplib::Request& http, httplib::Response& response);
  // A watch for `request` (answered 0 by Handle): its kind, selectors, deadline and what it
  // sends first (every object, or a 410 for a compacted resourceVersion).
  std::shared_ptr<Watcher> OpenWatch(const KubeRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Records a change of a node or pod for watchers, at the current resourceVersion (`before`
  // null for a new object, `after` null for a deleted one).
  void Record(Kind kind, const nlohmann::json& before, const nlohmann::json& after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Removes a pod as a delete or an eviction does, recorded for watchers (DELETED).
  void ErasePod(std::map<std::pair<std::string, std::string>, nlohmann::json>::iterator pod)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer PatchNode(const std::string& name, bool status_subresource, const KubeRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer CreateEvent(const std::string& ns, const KubeRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer PatchEvent(const std::string& ns, const std::string& name, const KubeRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer ListPods(const KubeRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A watch's answer: streamed (status 0) unless its resourceVersion is malformed (400).
  Answer WatchAnswer(const KubeRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer Evict(const std::string& ns, const std::string& name, const KubeRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // `name` empty: the collection (list, watch, POST).
  Answer ServeConfigMap(const std::string& ns, const std::string& name, const KubeRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // resource.k8s.io: discovery, ResourceSlices and DeviceTaintRules (`name` empty: the
  // collection).
  Answer ServeDra(const std::string& version, const std::string& resource, const std::string& name,
                  const KubeRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer ServeDeviceTaintRule(const std::string& version, const std::string& name,
                              const KubeRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Answer ServeResourceClaim(const std::string& version, const std::string& ns,
                            const std::string& name, const KubeRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // `name` empty: the collection (POST).
  Answer ServeLease(const std::string& ns, const std::string& name, const KubeRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Bump(nlohmann::json& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A node changed from `before` to `node`: a new resourceVersion for it, recorded for watchers.
  void Changed(const nlohmann::json& before, nlohmann::json& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ModifyNodeLocked(const std::string& name, const std::function<void(nlohmann::json&)>& change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  struct Change {
    uint64_t resource_version;
    Kind kind;
    nlohmann::json before, after;  // null: none (added / deleted)
  };

  KubeCredentials credentials_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  std::atomic<bool> listen_ended_{false};  // the server's listen has returned
  int port_ = 0;

  mutable absl::Mutex mutex_;
  std::string token_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, nlohmann::json> nodes_ ABSL_GUARDED_BY(mutex_);
  std::vector<nlohmann::json> events_ ABSL_GUARDED_BY(mutex_);
  std::map<std::pair<std::string, std::string>, nlohmann::json> pods_ ABSL_GUARDED_BY(mutex_);
  std::map<std::pair<std::string, std::string>, int> blocked_evictions_ ABSL_GUARDED_BY(mutex_);
  std::map<std::pair<std::string, std::string>, nlohmann::json> leases_ ABSL_GUARDED_BY(mutex_);
  std::map<std::pair<std::string, std::string>, nlohmann::json> config_maps_
      ABSL_GUARDED_BY(mutex_);
  uint64_t watch_events_[4] ABSL_GUARDED_BY(mutex_) = {};  // by Kind
  std::vector<std::string> slice_versions_ ABSL_GUARDED_BY(mutex_) = {"v1", "v1beta2", "v1beta1"};
  std::vector<std::string> rule_versions_ ABSL_GUARDED_BY(mutex_) = {"v1", "v1beta2", "v1alpha3"};
  std::map<std::string, nlohmann::json> resource_slices_ ABSL_GUARDED_BY(mutex_);  // v1 shape
  std::map<std::string, nlohmann::json> device_taint_rules_ ABSL_GUARDED_BY(mutex_);
  // By namespace and name, in the v1 shape.
  std::map<std::pair<std::string, std::string>, nlohmann::json> resource_claims_
      ABSL_GUARDED_BY(mutex_);
  uint64_t generated_names_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<KubeRequest> requests_ ABSL_GUARDED_BY(mutex_);
  uint64_t resource_version_ ABSL_GUARDED_BY(mutex_) = 1000;
  int fail_status_ ABSL_GUARDED_BY(mutex_) = 0;
  int fail_count_ ABSL_GUARDED_BY(mutex_) = 0;
  std::string fail_prefix_ ABSL_GUARDED_BY(mutex_);
  std::string fail_method_ ABSL_GUARDED_BY(mutex_);
  int fail_retry_after_ ABSL_GUARDED_BY(mutex_) = 0;
  int lose_count_ ABSL_GUARDED_BY(mutex_) = 0;
  std::string lose_prefix_ ABSL_GUARDED_BY(mutex_);
  struct ChangeBeforeRequest {
    std::string method, path, node;
    std::function<void(nlohmann::json&)> change;
  };
  std::optional<ChangeBeforeRequest> change_before_ ABSL_GUARDED_BY(mutex_);
  std::vector<Change> history_ ABSL_GUARDED_BY(mutex_);  // in resourceVersion order
  uint64_t compacted_ ABSL_GUARDED_BY(mutex_) = 0;       // history before this is forgotten
  int open_watches_ ABSL_GUARDED_BY(mutex_) = 0;
  int watches_opened_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t drops_ ABSL_GUARDED_BY(mutex_) = 0;      // DropWatches() calls
  uint64_t expiries_ ABSL_GUARDED_BY(mutex_) = 0;   // ExpireWatches() calls
  uint64_t bookmarks_ ABSL_GUARDED_BY(mutex_) = 0;  // Bookmark() calls
  static constexpr absl::Duration kBookmarkInterval = absl::Minutes(1);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Duration delay_ ABSL_GUARDED_BY(mutex_) = absl::ZeroDuration();
};

}  // namespace vigil::testing

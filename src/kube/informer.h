// A cache of one collection of Kubernetes objects (the cluster's GPU nodes, say) kept current by
// LIST then WATCH, as client-go's reflector does: a paginated LIST gives the objects and a
// resourceVersion; a WATCH from that resourceVersion (with bookmarks, so the resourceVersion
// stays recent while nothing changes) streams ADDED / MODIFIED / DELETED; a watch the server ends
// (its timeoutSeconds) is re-opened from the last resourceVersion; a dropped connection or an API
// error is retried with backoff from the last resourceVersion; `410 Gone` (the resourceVersion
// was compacted away, as an HTTP answer or as an ERROR event in the stream) re-lists. Readers are
// answered from memory: a decision that needs the cluster's state costs no request.
// Threads: one of its own (`vigil-informer`) after Start(); Get(), size(), synced() and stats()
// from any thread (one mutex, held only to copy); listeners run on the informer's
// thread without the mutex held.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil::kube {

// One line of a watch stream (a JSON WatchEvent), parsed.
struct WatchEvent {
  enum class Type : uint8_t { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kError;
  nlohmann::json object;         // the object (kError: the Status)
  std::string key;               // "NAMESPACE/NAME" or "NAME" (Informer::KeyOf); "" for the others
  std::string resource_version;  // the object's metadata.resourceVersion, if any
  int64_t error_code = 0;        // kError: the Status' code (410: the watch fell too far behind)
};
// InvalidArgument saying what is wrong for a line that is not a watch event, or whose type is
// not one of Kubernetes' (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) or whose object has no name.
absl::StatusOr<WatchEvent> ParseWatchEvent(std::string_view line);

struct InformerOptions {
  // The collection, e.g. "/api/v1/nodes".
  std::string path;
  std::string label_selector;  // "" for all
  // A field selector, e.g. "spec.nodeName=node-a" for the pods of one node (the API server
  // serves only the fields each kind indexes); "" for none.
  std::string field_selector;
  // Each watch asks the server to end it after a random time in [watch_timeout, 2 x
  // watch_timeout) (timeoutSeconds), so a fleet's re-watches do not come in lock-step. With
  // bookmarks the re-watch resumes; it is one request per 15 minutes on average.
  absl::Duration watch_timeout = absl::Minutes(10);
  // Objects per LIST page (limit / continue), as client-go's pager.
  int page_size = 500;
  // Errors (no answer, 5xx, 429, a broken stream) are retried from 1 s up to 30 s apart; a 429's
  // Retry-After is waited at least.
  BackoffPolicy backoff{.initial = absl::Seconds(1), .max = absl::Seconds(30)};
  // Reduces each object to what the cache's readers use (client-go's transform), so a cache of
  // 2,000 Nodes holds kilobytes, not the kubelet's image lists. Null keeps objects whole. Called
  // on the informer's thread.
  std::function<nlohmann::json(const nlohmann::json& object)> transform;
  // Named in logs ("GPU nodes").
  std::string description = "objects";
  Clock* clock = Clock::Real();
};

struct InformerStats {
  std::atomic<uint64_t> lists{0};    // LIST requests (pages)
  std::atomic<uint64_t> watches{0};  // WATCH requests opened
  std::atomic<uint64_t> relists{0};  // after 410 Gone
  std::atomic<uint64_t> errors{0};   // failed LISTs and WATCHes
  std::atomic<uint64_t> events{0};   // ADDED / MODIFIED / DELETED applied
  std::atomic<uint64_t> bookmarks{0};
};

class Informer {
 public:
  // Objects are cached by their key, as client-go's MetaNamespaceKeyFunc: "NAMESPACE/NAME" for
  // a namespaced object (a pod), "NAME" for a cluster-scoped one (a node).
  static std::string KeyOf(const nlohmann::json& object);

  // Called after the object `name` (its key) was added, modified or deleted (also by a re-list).
  using Listener = std::function<void(const std::string& name)>;

  // `api` (not owned) must outlive the informer.
  Informer(KubeApi* api, InformerOptions options);
  ~Informer();

  // Listeners are added before Start().
  void AddListener(Listener listener);
  // Called after every completed LIST (the first sync, and each re-list), after the listeners
  // of the objects it changed — also when it changed none (an empty collection).
  void AddSyncListener(std::function<void()> listener);
  // Idempotent.
  void Start();
  // Ends the watch in progress and joins the thread. Idempotent.
  void Stop();

  // Whether a LIST has completed: until then the cache says nothing about the cluster.
  bool synced() const;
  // The object as the cache holds it (transformed); nullopt when the cache has none of that name.
  std::optional<nlohmann::json> Get(const std::string& name) const;
  size_t size() const;
  // Every object the cache holds (transformed), by key.
  std::vector<nlohmann::json> List() const;
  // The metadata.resourceVersion of the object `name` as cached; "" when the cache has none.
  std::string ResourceVersionOf(const std::string& name) const;
  // The resourceVersion the next watch resumes from.
  std::string resource_version() const;
  // When the server was last heard from (a LIST, an event or a bookmark); InfinitePast before.
  // A watch whose connection died quietly shows as a growing age until the read times out.
  absl::Time last_heard() const;
  const InformerStats& stats() const { return stats_; }

 private:
  void Loop();
  // How a LIST or WATCH ended.
  enum class Outcome {
    kDone,   // a LIST completed; a WATCH ended by the server (its timeout) after some progress
    kGone,   // 410: the resourceVersion (or a continue token) is too old: list again
    kError,  // retry after a backoff (`error_` says why)
  };
  // One LIST, paginated: replaces the cache when complete. `consistent`: from etcd (after a
  // 410, so the cache cannot go back in time); otherwise resourceVersion=0, served from the API
  // server's watch cache, as client-go's first list (a fleet starting together must not read
  // every GPU node from etcd once per node).
  Outcome List(bool consistent);
  // One WATCH from the cache's resourceVersion until the server ends it, 410, an error or Stop().
  Outcome Watch();
  // Applies one line of the watch stream; false ends the watch with `outcome`.
  bool Apply(std::string_view line, Outcome* outcome);
  Outcome Fail(std::string error);
  void Notify(const std::vector<std::string>& names);
  bool stopping() const;

  KubeApi* const api_;
  const InformerOptions options_;
  Clock* const clock_;
  // "&labelSelector=…&fieldSelector=…", escaped, for every LIST and WATCH.
  const std::string selector_query_;
  InformerStats stats_;
  std::vector<Listener> listeners_;                    // set before Start()
  std::vector<std::function<void()>> sync_listeners_;  // set before Start()
  std::thread thread_;
  StreamCanceller cancel_;
  absl::Notification finished_;
  // Informer thread only: why the last LIST or WATCH failed, and the Retry-After of a 429.
  std::string error_;
  absl::Duration retry_after_ = absl::ZeroDuration();

  mutable absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  bool synced_ ABSL_GUARDED_BY(mutex_) = false;
  std::string resource_version_ ABSL_GUARDED_BY(mutex_);
  absl::Time last_heard_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  std::map<std::string, nlohmann::json> objects_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil::kube

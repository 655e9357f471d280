// One paginated LIST of a Kubernetes collection, as client-go's pager does it: pages of `limit`
// objects joined by `continue` tokens into one snapshot at the first page's resourceVersion. The
// informer lists this way before it watches; a one-off count (the health check's circuit breaker
// without a remediator) lists this way alone. Stateless; thread-safe as the KubeApi it is given.
#pragma once

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil::kube {

struct ListQuery {
  std::string path;                            // the collection, e.g. "/api/v1/nodes"
  std::string label_selector, field_selector;  // "" for none
  int page_size = 500;
  // From the API server's watch cache (resourceVersion=0: any recent state, no etcd read), as
  // client-go's first list; false for a consistent read (after a 410, so a cache never goes
  // back in time).
  bool from_cache = true;
  std::string description = "objects";  // for errors ("listing the GPU nodes: ...")
};

struct ListResult {
  enum class Outcome : uint8_t {
    kDone,   // every page read
    kGone,   // 410: a continue token expired mid-list: list again from the start
    kError,  // `error` says why; `retry_after` is a 429's Retry-After
  };
  Outcome outcome = Outcome::kError;
  std::string resource_version;  // of the snapshot (kDone)
  int pages = 0;                 // requests made
  std::string error;
  absl::Duration retry_after = absl::ZeroDuration();
};

// "&labelSelector=…&fieldSelector=…", escaped ("" when neither), for a LIST or a WATCH.
std::string SelectorQuery(const std::string& label_selector, const std::string& field_selector);

// What failed when a LIST or WATCH of `path` was answered `response` (not 2xx), for the log: a
// 401/403 names the RBAC the service account lacks.
std::string ListHttpError(std::string_view what, std::string_view path,
                          const KubeResponse& response);

// Lists `query`, calling `on_item` for each object in order; `on_item` returning false (an object
// it cannot use) ends the list with kError and the message it put in `*error`. `stopping`, when
// given, is asked after each page: true ends the list with kError "stopping".
ListResult ListAll(
    KubeApi& api, const ListQuery& query,
    const std::function<bool(const nlohmann::json& item, std::string* error)>& on_item,
    const std::function<bool()>& stopping = nullptr);

}  // namespace vigil::kube

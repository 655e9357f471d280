// Implements the paginated LIST (list.h).
#include "kube/list.h"

#include "common/status.h"
#include "fmt/format.h"
#include "kube/object.h"

namespace vigil::kube {

using Json = nlohmann::json;

std::string SelectorQuery(const std::string& label_selector, const std::string& field_selector) {
  return (label_selector.empty() ? "" : "&labelSelector=" + QueryEscape(label_selector)) +
         (field_selector.empty() ? "" : "&fieldSelector=" + QueryEscape(field_selector));
}

std::string ListHttpError(std::string_view what, std::string_view path,
                          const KubeResponse& response) {
  if (response.status == 401 || response.status == 403) {
    return fmt::format(
        "{}: {} {}: does the service account's ClusterRole (deploy/) allow list and watch of "
        "{}?",
        what, response.status, ApiMessage(response.body), path);
  }
  return fmt::format("{}: {} {}", what, response.status, ApiMessage(response.body));
}

ListResult ListAll(KubeApi& api, const ListQuery& query,
                   const std::function<bool(const Json& item, std::string* error)>& on_item,
                   const std::function<bool()>& stopping) {
  ListResult result;
  const std::string what = fmt::format("listing {}", query.description);
  const std::string selectors = SelectorQuery(query.label_selector, query.field_selector);
  std::string continue_token;
  do {
    std::string path = fmt::format("{}?limit={}{}", query.path, query.page_size, selectors);
    if (!continue_token.empty()) {
      path += "&continue=" + QueryEscape(continue_token);
    } else if (query.from_cache) {
      path += "&resourceVersion=0";
    }
    ++result.pages;
    auto response = api.Call("GET", path, "", "");
    if (!response.ok()) {
      result.error = fmt::format("{}: {}", what, MessageOf(response.status()));
      return result;
    }
    // The continue token expired (the list took longer than etcd keeps its revision).
    if (response->status == 410 && !continue_token.empty()) {
      result.outcome = ListResult::Outcome::kGone;
      return result;
    }
    if (response->status < 200 || response->status >= 300) {
      result.retry_after = response->retry_after;
      result.error = ListHttpError(what, query.path, *response);
      return result;
    }
    const Json page = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    const Json& items = At(page, "items");
    if (!items.is_array()) {
      result.error = what + ": the answer is not a list";
      return result;
    }
    for (const Json& item : items) {
      std::string error;
      if (!on_item(item, &error)) {
        result.error = fmt::format("{}: {}", what, error);
        return result;
      }
    }
    const Json& metadata = At(page, "metadata");
    continue_token = StringAt(metadata, "continue");
    // A paginated list is one snapshot: every page carries the first page's resourceVersion.
    if (result.resource_version.empty()) {
      result.resource_version = StringAt(metadata, "resourceVersion");
    }
    if (stopping && stopping()) {
      result.error = "stopping";
      return result;
    }
  } while (!continue_token.empty());
  if (result.resource_version.empty()) {
    result.error = what + ": the list has no resourceVersion";
    return result;
  }
  result.outcome = ListResult::Outcome::kDone;
  return result;
}

}  // namespace vigil::kube

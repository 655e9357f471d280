// Implements the informer: the LIST / WATCH loop, the watch stream's events, and the cache.
#include "kube/informer.h"

#include <random>

#include "common/status.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "kube/list.h"
#include "kube/object.h"
#include "spdlog/spdlog.h"

namespace vigil::kube {

using Json = nlohmann::json;

Informer::Informer(KubeApi* api, InformerOptions options)
    : api_(api),
      options_(std::move(options)),
      clock_(options_.clock),
      selector_query_(kube::SelectorQuery(options_.label_selector, options_.field_selector)) {}

std::string Informer::KeyOf(const Json& object) {
  const Json& metadata = kube::At(object, "metadata");
  const std::string name = kube::StringAt(metadata, "name");
  if (name.empty()) return "";
  const std::string ns = kube::StringAt(metadata, "namespace");
  return ns.empty() ? name : ns + "/" + name;
}

Informer::~Informer() { Stop(); }

void Informer::AddListener(Listener listener) { listeners_.push_back(std::move(listener)); }

void Informer::Start() {
  if (thread_.joinable()) return;
  thread_ = StartNamedThread("vigil-informer", [this] {
    Loop();
    finished_.Notify();
  });
}

void Informer::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (!thread_.joinable()) return;
  // A cancel that lands between the stream's start and its connect finds no socket to shut
  // down; it is repeated until the thread has seen it (at most a few rounds, on shutdown only).
  do {
    cancel_.Cancel();
  } while (!finished_.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  thread_.join();
}

bool Informer::stopping() const {
  absl::MutexLock lock(&mutex_);
  return stopping_;
}

bool Informer::synced() const {
  absl::MutexLock lock(&mutex_);
  return synced_;
}

std::optional<Json> Informer::Get(const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto it = objects_.find(name);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::string Informer::ResourceVersionOf(const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto it = objects_.find(name);
  if (it == objects_.end()) return "";
  return kube::StringAt(kube::At(it->second, "metadata"), "resourceVersion");
}

size_t Informer::size() const {
  absl::MutexLock lock(&mutex_);
  return objects_.size();
}

std::vector<nlohmann::json> Informer::List() const {
  absl::MutexLock lock(&mutex_);
  std::vector<nlohmann::json> out;
  out.reserve(objects_.size());
  for (const auto& [key, object] : objects_) out.push_back(object);
  return out;
}

std::string Informer::resource_version() const {
  absl::MutexLock lock(&mutex_);
  return resource_version_;
}

absl::Time Informer::last_heard() const {
  absl::MutexLock lock(&mutex_);
  return last_heard_;
}

void Informer::AddSyncListener(std::function<void()> listener) {
  sync_listeners_.push_back(std::move(listener));
}

void Informer::Notify(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    for (const Listener& listener : listeners_) listener(name);
  }
}

Informer::Outcome Informer::Fail(std::string error) {
  ++stats_.errors;
  error_ = std::move(error);
  return Outcome::kError;
}

void Informer::Loop() {
  Backoff backoff(options_.backoff);
  bool listed = false;
  bool consistent = false;  // the first list may come from the watch cache; a re-list may not
  int gone_in_a_row = 0;
  std::string last_error;
  while (!stopping()) {
    Outcome outcome = listed ? Watch() : List(consistent);
    if (stopping()) return;
    if (outcome == Outcome::kGone && ++gone_in_a_row > 1) {
      // A re-list that is at once Gone again (a server that keeps answering 410): back off.
      outcome = Fail(
          fmt::format("listing {}: 410 Gone again right after a re-list", options_.description));
    }
    if (outcome != Outcome::kGone) gone_in_a_row = 0;
    if (outcome == Outcome::kDone) {
      if (!listed) {
        spdlog::info("kubernetes: watching {} ({} at resourceVersion {})", options_.description,
                     size(), resource_version());
      } else if (!last_error.empty()) {
        spdlog::info("kubernetes: the watch of {} is back", options_.description);
      }
      listed = true;
      last_error.clear();
      backoff.Reset();
      continue;
    }
    if (outcome == Outcome::kGone) {
      // Re-list at once: the server says the watch cannot resume; waiting would only miss more.
      ++stats_.relists;
      spdlog::info("kubernetes: the resourceVersion of {} expired (410 Gone); listing again",
                   options_.description);
      listed = false;
      consistent = true;
      continue;
    }
    if (error_ != last_error) {
      spdlog::warn("kubernetes: {} (cache of {}: {} objects, kept); retrying with backoff", error_,
                   options_.description, size());
      last_error = error_;
    }
    const absl::Duration wait = std::max(backoff.Next(), retry_after_);
    retry_after_ = absl::ZeroDuration();
    absl::MutexLock lock(&mutex_);
    clock_->AwaitWithTimeout(&mutex_, absl::Condition(&stopping_), wait);
  }
}

Informer::Outcome Informer::List(bool consistent) {
  std::map<std::string, Json> listed;
  const kube::ListResult result = kube::ListAll(
      *api_,
      {.path = options_.path,
       .label_selector = options_.label_selector,
       .field_selector = options_.field_selector,
       .page_size = options_.page_size,
       .from_cache = !consistent,
       .description = options_.description},
      [&](const Json& item, std::string* error) {
        const std::string name = KeyOf(item);
        if (name.empty()) {
          *error = "an item without metadata.name";
          return false;
        }
        listed[name] = options_.transform ? options_.transform(item) : item;
        return true;
      },
      [this] { return stopping(); });
  stats_.lists += result.pages;
  if (result.outcome == kube::ListResult::Outcome::kGone) return Outcome::kGone;
  if (result.outcome == kube::ListResult::Outcome::kError) {
    retry_after_ = result.retry_after;
    return Fail(result.error);
  }
  std::vector<std::string> changed;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [name, object] : objects_) {
      auto it = listed.find(name);
      if (it == listed.end() || it->second != object) changed.push_back(name);
    }
    for (const auto& [name, object] : listed) {
      if (!objects_.contains(name)) changed.push_back(name);
    }
    objects_ = std::move(listed);
    resource_version_ = result.resource_version;
    synced_ = true;
    last_heard_ = clock_->Now();
  }
  Notify(changed);
  for (const auto& listener : sync_listeners_) listener();
  return Outcome::kDone;
}

Informer::Outcome Informer::Watch() {
  // A random timeout per watch spreads the re-watches of a fleet that started together.
  thread_local std::mt19937_64 rng(std::random_device{}());
  const int64_t base = std::max<int64_t>(1, absl::ToInt64Seconds(options_.watch_timeout));
  const int64_t timeout = std::uniform_int_distribution<int64_t>(base, 2 * base - 1)(rng);
  const std::string path =
      fmt::format("{}?watch=true&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={}{}",
                  options_.path, kube::QueryEscape(resource_version()), timeout, selector_query_);
  ++stats_.watches;
  const absl::Time opened = clock_->Now();
  const uint64_t events_before = stats_.events + stats_.bookmarks;
  Outcome outcome = Outcome::kDone;
  auto response = api_->Stream(
      path, [&](std::string_view line) { return Apply(line, &outcome); }, &cancel_);
  const std::string what = fmt::format("watching {}", options_.description);
  if (outcome != Outcome::kDone) return outcome;  // ended by a line: an ERROR event or bad JSON
  if (!response.ok()) return Fail(fmt::format("{}: {}", what, MessageOf(response.status())));
  if (response->status == 410) return Outcome::kGone;
  if (response->status < 200 || response->status >= 300) {
    retry_after_ = response->retry_after;
    return Fail(kube::ListHttpError(what, options_.path, *response));
  }
  // A server that ends every watch at once would make this loop spin: such a watch is an error.
  if (stats_.events + stats_.bookmarks == events_before &&
      clock_->Now() - opened < absl::Seconds(1)) {
    return Fail(what + ": the server ended the watch at once without an event");
  }
  return Outcome::kDone;
}

absl::StatusOr<WatchEvent> ParseWatchEvent(std::string_view line) {
  const Json event = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  const std::string type = kube::StringAt(event, "type");
  const Json& object = kube::At(event, "object");
  if (type.empty() || !object.is_object()) {
    return absl::InvalidArgumentError(
        fmt::format("a line of the stream is not a watch event: {}", line.substr(0, 200)));
  }
  WatchEvent parsed{
      .object = object,
      .resource_version = kube::StringAt(kube::At(object, "metadata"), "resourceVersion")};
  if (type == "ERROR") {
    const Json& code = kube::At(object, "code");
    parsed.error_code = code.is_number_integer() ? code.get<int64_t>() : 0;
    return parsed;
  }
  if (type == "BOOKMARK") {
    parsed.type = WatchEvent::Type::kBookmark;
    return parsed;
  }
  parsed.key = Informer::KeyOf(object);
  if (parsed.key.empty() || (type != "ADDED" && type != "MODIFIED" && type != "DELETED")) {
    return absl::InvalidArgumentError(
        fmt::format("an event of type '{}' for '{}' is not understood", type, parsed.key));
  }
  parsed.type = type == "ADDED"      ? WatchEvent::Type::kAdded
                : type == "MODIFIED" ? WatchEvent::Type::kModified
                                     : WatchEvent::Type::kDeleted;
  return parsed;
}

bool Informer::Apply(std::string_view line, Outcome* outcome) {
  if (line.empty()) return true;
  absl::StatusOr<WatchEvent> event = ParseWatchEvent(line);
  if (!event.ok()) {
    *outcome =
        Fail(fmt::format("watching {}: {}", options_.description, MessageOf(event.status())));
    return false;
  }
  switch (event->type) {
    case WatchEvent::Type::kError:
      // A Status: 410 Expired/Gone when the watch fell too far behind; anything else is retried.
      if (event->error_code == 410) {
        *outcome = Outcome::kGone;
      } else {
        *outcome =
            Fail(fmt::format("watching {}: the server ended the watch: {} {}", options_.description,
                             event->error_code, kube::StringAt(event->object, "message")));
      }
      return false;
    case WatchEvent::Type::kBookmark: {
      absl::MutexLock lock(&mutex_);
      ++stats_.bookmarks;
      if (!event->resource_version.empty()) resource_version_ = event->resource_version;
      last_heard_ = clock_->Now();
      return true;
    }
    case WatchEvent::Type::kAdded:
    case WatchEvent::Type::kModified:
    case WatchEvent::Type::kDeleted:
      break;
  }
  std::optional<Json> kept;
  if (event->type != WatchEvent::Type::kDeleted) {
    kept = options_.transform ? options_.transform(event->object) : std::move(event->object);
  }
  {
    absl::MutexLock lock(&mutex_);
    if (kept.has_value()) {
      objects_[event->key] = std::move(*kept);
    } else {
      objects_.erase(event->key);
    }
    if (!event->resource_version.empty()) resource_version_ = event->resource_version;
    last_heard_ = clock_->Now();
    ++stats_.events;  // with the change, so a reader that sees the change sees the count
  }
  Notify({event->key});
  return true;
}

}  // namespace vigil::kube

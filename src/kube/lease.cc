// Implements the Lease lock.
#include "kube/lease.h"

#include "fmt/format.h"
#include "kube/object.h"

namespace vigil::kube {
namespace {

using Json = nlohmann::json;

// metav1.MicroTime, as Leases carry it.
std::string MicroTime(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", time, absl::UTCTimeZone());
}

}  // namespace

LeaseLock::LeaseLock(KubeApi* api, Clock* clock, LeaseOptions options)
    : api_(api), clock_(clock), options_(std::move(options)) {}

absl::StatusOr<bool> LeaseLock::Write(const std::string& method, const std::string& path,
                                      const Json& lease) {
  auto response = api_->Call(method, path, kJsonContent, lease.dump());
  if (!response.ok()) {
    held_ = false;
    return response.status();
  }
  if (response->status == 409) {  // another replica wrote first: it wins
    held_ = false;
    return false;
  }
  if (response->status != 200 && response->status != 201) {
    held_ = false;
    return absl::FailedPreconditionError(fmt::format("writing Lease {}/{}: HTTP {}: {}",
                                                     options_.ns, options_.name, response->status,
                                                     ApiMessage(response->body)));
  }
  held_ = true;
  holder_ = options_.identity;
  return true;
}

absl::StatusOr<bool> LeaseLock::TryAcquireOrRenew() {
  const std::string collection =
      fmt::format("/apis/coordination.k8s.io/v1/namespaces/{}/leases", QueryEscape(options_.ns));
  const std::string path = collection + "/" + QueryEscape(options_.name);
  const absl::Time now = clock_->Now();
  const int64_t seconds = absl::ToInt64Seconds(options_.duration);
  auto response = api_->Call("GET", path, "", "");
  if (!response.ok()) {
    held_ = false;
    return response.status();
  }
  if (response->status == 404) {
    transitions_ = 0;
    return Write("POST", collection,
                 {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", options_.name}, {"namespace", options_.ns}}},
                  {"spec",
                   {{"holderIdentity", options_.identity},
                    {"leaseDurationSeconds", seconds},
                    {"acquireTime", MicroTime(now)},
                    {"renewTime", MicroTime(now)},
                    {"leaseTransitions", 0}}}});
  }
  if (response->status != 200) {
    held_ = false;
    return absl::FailedPreconditionError(fmt::format("reading Lease {}/{}: HTTP {}: {}",
                                                     options_.ns, options_.name, response->status,
                                                     ApiMessage(response->body)));
  }
  Json lease = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!lease.is_object()) {
    held_ = false;
    return absl::FailedPreconditionError(
        fmt::format("reading Lease {}/{}: not a Lease", options_.ns, options_.name));
  }
  const Json& spec = At(lease, "spec");
  holder_ = StringAt(spec, "holderIdentity");
  const Json& count = At(spec, "leaseTransitions");
  transitions_ = count.is_number_integer() ? count.get<int>() : 0;
  const std::string record = holder_ + "@" + StringAt(spec, "renewTime");
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = now;
  }
  const bool mine = holder_ == options_.identity;
  const bool expired = holder_.empty() || now - observed_at_ >= options_.duration;
  if (!mine && !expired) {
    held_ = false;
    return false;
  }
  // Renew, or take over (a new holder counts a transition).
  Json& writable = lease["spec"];
  if (!mine) {
    writable["holderIdentity"] = options_.identity;
    writable["acquireTime"] = MicroTime(now);
    writable["leaseTransitions"] = transitions_ + 1;
  }
  writable["renewTime"] = MicroTime(now);
  writable["leaseDurationSeconds"] = seconds;
  auto written = Write("PUT", path, lease);
  if (written.ok() && *written && !mine) ++transitions_;
  return written;
}

absl::Status LeaseLock::Release() {
  if (!held_) return absl::OkStatus();
  const std::string path = fmt::format("/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
                                       QueryEscape(options_.ns), QueryEscape(options_.name));
  auto response = api_->Call("GET", path, "", "");
  held_ = false;
  if (!response.ok()) return response.status();
  Json lease = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (response->status != 200 || !lease.is_object() ||
      StringAt(At(lease, "spec"), "holderIdentity") != options_.identity) {
    return absl::OkStatus();  // not ours any more
  }
  lease["spec"]["holderIdentity"] = "";
  auto written = api_->Call("PUT", path, kJsonContent, lease.dump());
  if (!written.ok()) return written.status();
  return absl::OkStatus();
}

}  // namespace vigil::kube

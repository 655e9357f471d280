// Small helpers for reading Kubernetes objects and writing requests: a string at a key of a JSON
// object (empty when absent or not a string), metav1.Time, query escaping, the message of a
// Status answer, and the order of two resourceVersions. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/kube_api.h"
#include "nlohmann/json.hpp"

namespace vigil::kube {

// object[key] when `object` is an object and the value a string, else "".
std::string StringAt(const nlohmann::json& object, std::string_view key);
// object[key] when present, else null (never throws, never inserts).
const nlohmann::json& At(const nlohmann::json& object, std::string_view key);

// metav1.Time: RFC 3339 in UTC with second precision.
std::string Time(absl::Time time);

// A DNS name as the API validates names: 1 to `max` of lower-case letters, digits and '-' (and '.'
// with `dots`: a DNS subdomain; without: a DNS label), beginning and ending alphanumeric.
bool IsDnsName(std::string_view text, bool dots, size_t max);

// Percent-encodes everything but unreserved characters (RFC 3986), for a query value.
std::string QueryEscape(std::string_view text);

// The "message" of a Kubernetes Status answer, or the start of the body.
std::string ApiMessage(const std::string& body);
// What a request got, for a log line or an error: the answer's ApiMessage(), or why there was
// none.
std::string AnswerText(const absl::StatusOr<KubeResponse>& response);

// Whether resourceVersion `candidate` is later than `known`. The API documents them as opaque;
// every API server backed by etcd serves etcd revisions, so two decimal numbers are compared as
// numbers, and anything else that differs counts as later (the safe side: the object is taken).
bool IsLaterResourceVersion(std::string_view candidate, std::string_view known);

}  // namespace vigil::kube

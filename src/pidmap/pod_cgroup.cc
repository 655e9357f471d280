// Implements the cgroup path parser by hand: the layouts are few and fixed (the kubelet's
// cgroup_manager_linux.go names them), and a regex would accept more than they hold.
#include "pidmap/pod_cgroup.h"

#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "common/files.h"
#include "common/status.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace vigil::pidmap {
namespace {

bool AllHex(std::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) || absl::ascii_isupper(c)) {
      return false;
    }
  }
  return true;
}

// A pod UID as the kubelet writes it in a cgroup name: a UUID with '-' (cgroupfs) or '_' (systemd,
// where '-' separates the slice's parents), or 32 hex digits (a static pod's hash). "" otherwise.
std::string PodUid(std::string_view text) {
  if (text.size() == 32 && AllHex(text)) return std::string(text);
  if (text.size() != 36) return "";
  std::string uid(text);
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash) {
      if (uid[i] != '-' && uid[i] != '_') return "";
      uid[i] = '-';
    } else if (!AllHex(uid.substr(i, 1))) {
      return "";
    }
  }
  return uid;
}

// The container id of a path segment: "<64 hex>" (cgroupfs) or "<runtime>-<64 hex>.scope"
// (systemd: cri-containerd-, docker-, crio-; cri-o's cgroupfs "crio-<64 hex>"). "" otherwise.
std::string ContainerId(std::string_view segment) {
  if (segment.ends_with(".scope")) segment.remove_suffix(6);
  if (const size_t dash = segment.rfind('-'); dash != std::string_view::npos) {
    segment.remove_prefix(dash + 1);  // cri-containerd-, docker-, crio-
  }
  return segment.size() == 64 && AllHex(segment) ? std::string(segment) : "";
}

// The pod of one cgroup path; nullopt when the path is not under kubepods.
std::optional<PodCgroup> PodOfPath(std::string_view path) {
  const std::vector<std::string_view> segments = Split(path, '/');
  for (size_t i = 0; i < segments.size(); ++i) {
    std::string_view segment = segments[i];
    std::string uid;
    bool under_kubepods = false;
    if (segment.starts_with("pod")) {
      uid = PodUid(segment.substr(3));  // cgroupfs: .../kubepods[/QOS]/pod<uid>/<container>
      // Read from a pod with a cgroup namespace of its own, the path is relative to the reader's
      // container, which is under kubepods: "/../../[QOS/]pod<uid>/<container>".
      bool climbs_out_of_a_pod = i > 0 && segments[1] == "..";
      for (size_t j = 0; j < i; ++j) {
        under_kubepods |= segments[j].find("kubepods") != std::string_view::npos;
        if (j > 0 && segments[j] != ".." && segments[j] != "besteffort" &&
            segments[j] != "burstable") {
          climbs_out_of_a_pod = false;
        }
      }
      under_kubepods |= climbs_out_of_a_pod;
    } else if (segment.ends_with(".slice")) {
      // systemd: [kubelet-]kubepods[-QOS]-pod<uid>.slice (the slice names its parents)
      const size_t pod = segment.rfind("-pod");
      if (pod != std::string_view::npos) {
        uid = PodUid(segment.substr(pod + 4, segment.size() - pod - 4 - 6));
        under_kubepods = segment.substr(0, pod).find("kubepods") != std::string_view::npos;
      }
    }
    if (uid.empty() || !under_kubepods) continue;
    PodCgroup found{.pod_uid = uid};
    if (i + 1 < segments.size()) found.container_id = ContainerId(segments[i + 1]);
    return found;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<PodCgroup> ParseProcCgroup(std::string_view text) {
  std::optional<PodCgroup> found;
  bool any_line = false;
  for (std::string_view line : Split(text, '\n')) {
    if (Trim(line).empty()) continue;
    // hierarchy-ID:controller-list:path; the path itself may hold ':'.
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos || !ParseUint64(line.substr(0, first))) {
      return absl::InvalidArgumentError(
          fmt::format("not a cgroup line: '{}'", Printable(line, 80)));
    }
    any_line = true;
    const std::optional<PodCgroup> pod = PodOfPath(line.substr(second + 1));
    if (!pod) continue;
    if (!found) {
      found = pod;
    } else if (found->pod_uid != pod->pod_uid) {
      return absl::InvalidArgumentError(
          fmt::format("the cgroup lines name two pods, {} and {}", found->pod_uid, pod->pod_uid));
    } else if (found->container_id.empty()) {
      found->container_id = pod->container_id;
    }
  }
  if (!any_line) return absl::InvalidArgumentError("an empty cgroup file");
  if (!found) return absl::NotFoundError("the process is in no pod's cgroup");
  return *found;
}

absl::StatusOr<PodCgroup> PodOfPid(const std::string& proc_root, uint32_t pid) {
  const std::string path = fmt::format("{}/{}/cgroup", proc_root, pid);
  auto text = ReadFile(path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(fmt::format("process {} is gone ({} does not exist)", pid, path));
  }
  if (!text.ok()) return text.status();
  auto pod = ParseProcCgroup(*text);
  if (!pod.ok()) return WithContext(pod.status(), path);
  return pod;
}

absl::Status CheckHostProcRoot(const std::string& proc_root) {
  auto comm = ReadFile(proc_root + "/2/comm");
  if (comm.ok() && Trim(*comm) == "kthreadd") return absl::OkStatus();
  return absl::FailedPreconditionError(fmt::format(
      "{} does not show the host's processes (its pid 2 is not kthreadd), and the pids NVML "
      "gives are the host's: mount the host's /proc read-only (e.g. at /host/proc) and pass "
      "--proc-root /host/proc, or run the pod with hostPID",
      proc_root));
}

}  // namespace vigil::pidmap

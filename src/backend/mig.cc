// Implements the MIG profiles, layouts and placements (mig.h).
#include "backend/mig.h"

#include <algorithm>
#include <functional>
#include <map>

#include "common/crc32.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace vigil {

const std::vector<MigProfile>& H100MigProfiles() {
  // NVIDIA's MIG user guide, "H100 MIG Profiles" (H100-SXM5-80GB / PCIe 80GB): the fraction of
  // memory and SMs and the instances available; the placements as `nvidia-smi mig -lgipp` lists
  // them. (The +me media-extension variants are not simulated.)
  static const auto* const profiles = new std::vector<MigProfile>{
      {"1g.10gb", 1, 1, {0, 1, 2, 3, 4, 5, 6}, 7},
      {"1g.20gb", 1, 2, {0, 2, 4, 6}, 4},
      {"2g.20gb", 2, 2, {0, 2, 4}, 3},
      {"3g.40gb", 3, 4, {0, 4}, 2},
      {"4g.40gb", 4, 4, {0}, 1},
      {"7g.80gb", 7, 8, {0}, 1},
  };
  return *profiles;
}

const MigProfile* FindMigProfile(std::string_view name) {
  for (const MigProfile& profile : H100MigProfiles()) {
    if (profile.name == name) return &profile;
  }
  return nullptr;
}

std::string MigProfileChoices() {
  const auto& profiles = H100MigProfiles();
  std::string out;
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (i > 0) out += i + 1 == profiles.size() ? " or " : ", ";
    out += profiles[i].name;
  }
  return out;
}

absl::StatusOr<MigLayout> ParseMigLayout(std::string_view text) {
  const auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        fmt::format("--mig '{}': {}; give GPU:PROFILE[,PROFILE...], e.g. 0:1g.10gb,1g.10gb,2g.20gb",
                    text, why));
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0) return invalid("no GPU index before ':'");
  MigLayout layout;
  const std::optional<uint64_t> gpu = ParseUint64(text.substr(0, colon));
  if (!gpu.has_value() || *gpu > 1023) return invalid("the GPU is not an index");
  layout.gpu = static_cast<uint32_t>(*gpu);
  for (std::string_view piece : Split(text.substr(colon + 1), ',')) {
    const std::string profile(piece);
    if (FindMigProfile(profile) == nullptr) {
      return invalid(fmt::format("unknown profile '{}' (the simulated H100 80GB has {})", profile,
                                 MigProfileChoices()));
    }
    layout.profiles.push_back(profile);
  }
  return layout;
}

absl::StatusOr<std::vector<MigInstance>> PlaceMigInstances(const std::vector<std::string>& profiles,
                                                           uint64_t gpu_memory_mib,
                                                           std::string_view uuid_seed) {
  std::vector<const MigProfile*> wanted;
  std::map<std::string_view, uint32_t> counts;
  uint32_t compute = 0;
  for (const std::string& name : profiles) {
    const MigProfile* profile = FindMigProfile(name);
    if (profile == nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("unknown MIG profile '{}': use {}", name, MigProfileChoices()));
    }
    if (++counts[profile->name] > profile->max_instances) {
      return absl::InvalidArgumentError(
          fmt::format("{} x {}: an H100 80GB holds at most {} of them", counts[profile->name], name,
                      profile->max_instances));
    }
    compute += profile->compute_slices;
    wanted.push_back(profile);
  }
  if (compute > kMigComputeSlices) {
    return absl::InvalidArgumentError(fmt::format(
        "the profiles need {} compute slices; an H100 80GB has {}", compute, kMigComputeSlices));
  }
  // Larger instances first (fewer places to go), then a search over the starts.
  std::vector<size_t> order(wanted.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return wanted[a]->memory_slices > wanted[b]->memory_slices;
  });
  std::vector<uint32_t> start(wanted.size());
  std::vector<bool> used(kMigMemorySlices, false);
  std::function<bool(size_t)> place = [&](size_t k) {
    if (k == order.size()) return true;
    const MigProfile& profile = *wanted[order[k]];
    for (uint32_t at : profile.starts) {
      bool free = at + profile.memory_slices <= kMigMemorySlices;
      for (uint32_t s = at; free && s < at + profile.memory_slices; ++s) free = !used[s];
      if (!free) continue;
      for (uint32_t s = at; s < at + profile.memory_slices; ++s) used[s] = true;
      start[order[k]] = at;
      if (place(k + 1)) return true;
      for (uint32_t s = at; s < at + profile.memory_slices; ++s) used[s] = false;
    }
    return false;
  };
  if (!place(0)) {
    std::string list;
    for (const std::string& name : profiles) list += (list.empty() ? "" : ",") + name;
    return absl::InvalidArgumentError(fmt::format(
        "{} do not fit on one H100 80GB: no placement leaves them apart on its {} memory slices",
        list, kMigMemorySlices));
  }
  std::vector<size_t> by_start(wanted.size());
  for (size_t i = 0; i < by_start.size(); ++i) by_start[i] = i;
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](size_t a, size_t b) { return start[a] < start[b]; });
  std::vector<MigInstance> instances;
  for (size_t i : by_start) {
    const MigProfile& profile = *wanted[i];
    const uint32_t id = static_cast<uint32_t>(instances.size() + 1);
    // A stable UUID per GPU, placement and profile.
    const std::string key = fmt::format("{}/{}/{}", uuid_seed, start[i], profile.name);
    const uint32_t a = Crc32(key), b = Crc32(key + "#1"), c = Crc32(key + "#2"),
                   d = Crc32(key + "#3");
    instances.push_back(
        {.gpu_instance_id = id,
         .compute_instance_id = 0,
         .profile = std::string(profile.name),
         .uuid = fmt::format("MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:04x}{:08x}", a, b >> 16, b & 0xffff,
                             c >> 16, c & 0xffff, d),
         .placement_start = start[i],
         .placement_size = profile.memory_slices,
         .memory_total_mib = gpu_memory_mib * profile.memory_slices / kMigMemorySlices,
         .compute_slices = profile.compute_slices});
  }
  return instances;
}

}  // namespace vigil

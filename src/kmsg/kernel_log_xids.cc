// Implements the kernel log's XID source: records to XIDs for the engine's GPUs, and the replay
// state in the state dir.
#include "kmsg/kernel_log_xids.h"

#include <time.h>

#include "common/status.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace vigil::kmsg {
namespace {

absl::Duration MonotonicNow() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return absl::DurationFromTimespec(now);
}

}  // namespace

KernelLogXids::KernelLogXids(KernelLogXidsOptions options, const std::vector<GpuIdentity>& gpus,
                             EventSink* sink)
    : options_(std::move(options)), sink_(sink) {
  for (const GpuIdentity& gpu : gpus) {
    if (auto bus = NormalizeBusId(gpu.pci_bus_id); bus.has_value()) gpu_by_bus_[*bus] = gpu.index;
  }
  reader_ = std::make_unique<Reader>(ReaderOptions{.path = options_.path, .clock = options_.clock},
                                     [this](const Record& record) { OnRecord(record); });
  if (options_.state_path.empty()) return;
  // What an earlier run in this boot applied.
  auto saved = options_.env->ReadFile(options_.state_path);
  if (!saved.ok()) {
    if (!absl::IsNotFound(saved.status())) {
      spdlog::warn("kmsg: cannot read {}: {}; the kernel log's XIDs since boot are applied again",
                   options_.state_path, MessageOf(saved.status()));
    }
    return;
  }
  const nlohmann::json state = nlohmann::json::parse(*saved, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object() || !state.contains("boot_id") || !state["boot_id"].is_string() ||
      !state.contains("sequence") || !state["sequence"].is_number_unsigned()) {
    spdlog::warn(
        "kmsg: {} is not what the engine writes; the kernel log's XIDs since boot are "
        "applied again",
        options_.state_path);
    return;
  }
  if (state["boot_id"].get<std::string>() == options_.boot_id) {
    applied_ = state["sequence"].get<uint64_t>();
  }  // else a reboot: the log starts afresh, and so does what was applied
}

KernelLogXids::~KernelLogXids() { Stop(); }

void KernelLogXids::CatchUp() {
  catching_up_ = true;
  reader_->CatchUp();
  catching_up_ = false;
  if (stats_.replayed > 0 || stats_.already_applied > 0) {
    spdlog::info(
        "kmsg: {} XID(s) from the kernel log since boot applied, {} already applied before a "
        "restart",
        stats_.replayed.load(), stats_.already_applied.load());
  }
}

void KernelLogXids::Start() { reader_->Start(); }

void KernelLogXids::Stop() { reader_->Stop(); }

void KernelLogXids::SaveApplied(uint64_t sequence) {
  applied_ = sequence;
  if (options_.state_path.empty()) return;
  const std::string state =
      nlohmann::json{{"boot_id", options_.boot_id}, {"sequence", sequence}}.dump() + "\n";
  if (absl::Status saved = WriteFileAtomically(options_.env, options_.state_path, state);
      !saved.ok()) {
    if (stats_.state_failures++ == 0) {
      spdlog::warn("kmsg: cannot save {} ({}); a restart may apply XIDs again", options_.state_path,
                   MessageOf(saved));
    }
  }
}

void KernelLogXids::OnRecord(const Record& record) {
  const DriverLine line = ParseDriverLine(record.message);
  if (std::holds_alternative<std::monostate>(line)) return;
  if (record.facility != 0) {
    // Written to /dev/kmsg by a process: the kernel cannot be impersonated that way.
    ++stats_.not_kernel;
    spdlog::warn("kmsg: ignored a driver-looking line written by a process (facility {}): {}",
                 record.facility, record.message.substr(0, 200));
    return;
  }
  if (const auto* sxid = std::get_if<DriverSxid>(&line)) {
    if (sxid->kind == SxidLineKind::kError) {
      ++stats_.sxids;
      spdlog::warn("kmsg: NVSwitch {} ({}) SXid {}: {}", sxid->nvswitch, sxid->bus_id, sxid->code,
                   sxid->text);
    }
    return;
  }
  const DriverXid& xid = std::get<DriverXid>(line);
  auto gpu = gpu_by_bus_.find(xid.bus_id);
  if (gpu == gpu_by_bus_.end()) {
    ++stats_.unknown_bus;
    if (unknown_logged_.insert(xid.bus_id).second) {
      spdlog::warn(
          "kmsg: XID {} for PCI {}, which is none of this engine's GPUs (a GPU the "
          "driver lost before the engine found it?): {}",
          xid.code, xid.bus_id, record.message.substr(0, 200));
    }
    return;
  }
  if (record.sequence <= applied_ && applied_ > 0) {
    ++stats_.already_applied;
    return;
  }
  // The record's time: the kernel log's clock is CLOCK_MONOTONIC since boot.
  const absl::Duration now_monotonic =
      options_.monotonic_now ? options_.monotonic_now() : MonotonicNow();
  const absl::Duration ago =
      std::max(absl::ZeroDuration(), now_monotonic - absl::Microseconds(record.monotonic_us));
  std::string detail = xid.text.substr(0, 300);
  if (xid.pid.has_value()) detail += fmt::format(" (pid {} {})", *xid.pid, xid.process);
  sink_->OnXid(XidEvent{.gpu = gpu->second,
                        .xid = xid.code,
                        .time = options_.clock->Now() - ago,
                        .source = vigil::XidSource::kKernelLog,
                        .detail = detail});
  ++stats_.xids;
  if (catching_up_) ++stats_.replayed;
  SaveApplied(record.sequence);
}

}  // namespace vigil::kmsg

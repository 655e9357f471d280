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
  reader_ = std::make_unique<Reader>(
      ReaderOptions{
          .path = options_.path, .on_idle = [this] { SaveSettled(); }, .clock = options_.clock},
      [this](const Record& record) { OnRecord(record); });
  source_ = reader_->description();
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
  saved_state_ = SavedState{.boot_id = state["boot_id"].get<std::string>(),
                            .source = state.value("path", ""),
                            .sequence = state["sequence"].get<uint64_t>()};
}

void KernelLogXids::UseSavedStateOf(const std::string& source) {
  reading_ = source;
  applied_before_.reset();
  saved_.reset();
  // Another boot's, or another log's (a replayed file, the journal: sequences of their own):
  // start afresh.
  if (saved_state_.has_value() && saved_state_->boot_id == options_.boot_id &&
      saved_state_->source == source) {
    applied_before_ = saved_state_->sequence;
    saved_ = applied_before_;
  }
}

KernelLogXids::~KernelLogXids() { Stop(); }

void KernelLogXids::CatchUp() {
  catching_up_ = true;
  UseSavedStateOf(reader_->description());
  reader_->CatchUp();
  if (reader_->stats().state != LogState::kReading && !options_.journal_dir.empty()) {
    // /dev/kmsg closed to this process (runc's device rules, no CAP_SYSLOG): the journal holds
    // the same records, copied by journald.
    auto journal =
        std::make_unique<JournalReader>(JournalReaderOptions{.directory = options_.journal_dir,
                                                             .boot_id = options_.boot_id,
                                                             .on_idle = [this] { SaveSettled(); },
                                                             .clock = options_.clock},
                                        [this](const Record& record) { OnRecord(record); });
    UseSavedStateOf(journal->description());
    journal->CatchUp();
    if (journal->stats().state == LogState::kReading) {
      spdlog::warn(
          "kmsg: {} cannot be read; the kernel's messages are read from the {} instead (XIDs "
          "and SXids as the driver logged them)",
          options_.path, journal->description());
      reader_->Stop();
      reader_ = std::move(journal);
    } else {
      journal->Stop();
      UseSavedStateOf(reader_->description());
    }
  }
  source_ = reader_->description();  // read on every tick (the counters): made once
  catching_up_ = false;
  if (stats_.replayed > 0 || stats_.already_applied > 0) {
    spdlog::info(
        "kmsg: {} XID(s) logged since boot handed to the engine (which skips any that an "
        "incident it kept already counts), {} already applied before a restart",
        stats_.replayed.load(), stats_.already_applied.load());
  }
}

void KernelLogXids::Start() { reader_->Start(); }

void KernelLogXids::Stop() {
  reader_->Stop();
  SaveSettled();  // the reader's thread has ended: this thread owns the state now
}

void KernelLogXids::SaveSettled() {
  const absl::Time settled = options_.clock->Now() - kSettle;
  std::optional<uint64_t> sequence;
  while (!unsettled_.empty() && unsettled_.front().second <= settled) {
    sequence = unsettled_.front().first;
    unsettled_.pop_front();
  }
  if (!sequence.has_value() || sequence == saved_) return;
  saved_ = sequence;
  if (options_.state_path.empty()) return;
  const std::string state =
      nlohmann::json{{"boot_id", options_.boot_id}, {"path", source_}, {"sequence", *sequence}}
          .dump() +
      "\n";
  if (absl::Status saved = WriteFileAtomically(options_.env, options_.state_path, state);
      !saved.ok()) {
    if (stats_.state_failures++ == 0) {
      spdlog::warn("kmsg: cannot save {} ({}); a restart may apply XIDs again", options_.state_path,
                   MessageOf(saved));
    }
  }
}

absl::Time KernelLogXids::RecordTime(const Record& record) const {
  // The time of a record from before the start: its timestamp, on the kernel log's clock
  // (CLOCK_MONOTONIC since boot). One followed live: now — that clock drifts from the wall clock
  // by more than the engine's merge window over days of uptime.
  if (!catching_up_) return options_.clock->Now();
  const absl::Duration now_monotonic =
      options_.monotonic_now ? options_.monotonic_now() : MonotonicNow();
  return options_.clock->Now() -
         std::max(absl::ZeroDuration(), now_monotonic - absl::Microseconds(record.monotonic_us));
}

void KernelLogXids::OnRecord(const Record& record) {
  const DriverLine line = ParseDriverLine(record.message);
  if (std::holds_alternative<std::monostate>(line)) {
    const bool applied_before = applied_before_.has_value() && record.sequence <= *applied_before_;
    if (record.facility == 0 && !applied_before && options_.other_lines &&
        options_.other_lines(record.message, RecordTime(record))) {
      unsettled_.emplace_back(record.sequence, options_.clock->Now());
    }
    return;
  }
  if (record.facility != 0) {
    // Written to /dev/kmsg by a process: the kernel cannot be impersonated that way.
    ++stats_.not_kernel;
    spdlog::warn("kmsg: ignored a driver-looking line written by a process (facility {}): {}",
                 record.facility, record.message.substr(0, 200));
    return;
  }
  // Seen by an earlier run in this boot (and, for a bus of no GPU, logged and counted by it).
  const bool applied_before = applied_before_.has_value() && record.sequence <= *applied_before_;
  if (const auto* sxid = std::get_if<DriverSxid>(&line)) {
    // The Severity and Data lines that follow an SXid are the same error.
    if (sxid->kind != SxidLineKind::kError || applied_before) return;
    ++stats_.sxids;
    sink_->OnSxid(SxidEvent{.nvswitch = sxid->nvswitch,
                            .pci_bus_id = sxid->bus_id,
                            .sxid = sxid->code,
                            .fatal = sxid->severity == SxidSeverity::kFatal,
                            .link = sxid->link,
                            .detail = sxid->text.substr(0, 300),
                            .time = RecordTime(record),
                            .log_position = LogPosition{reading_, record.sequence}});
    unsettled_.emplace_back(record.sequence, options_.clock->Now());
    return;
  }
  const DriverXid& xid = std::get<DriverXid>(line);
  auto gpu = gpu_by_bus_.find(xid.bus_id);
  if (applied_before) {
    if (gpu != gpu_by_bus_.end()) ++stats_.already_applied;
    return;
  }
  if (xid.code == 79) {
    // The Xid 79 line and "GPU has fallen off the bus." are one event, printed together.
    auto last = last_79_us_.find(xid.bus_id);
    const bool same =
        last != last_79_us_.end() && std::abs(record.monotonic_us - last->second) <= 10'000'000;
    last_79_us_[xid.bus_id] = record.monotonic_us;
    if (same) return;
  }
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
  std::string detail = xid.text.substr(0, 300);
  if (xid.pid.has_value()) detail += fmt::format(" (pid {} {})", *xid.pid, xid.process);
  sink_->OnXid(XidEvent{.gpu = gpu->second,
                        .xid = xid.code,
                        .time = RecordTime(record),
                        .source = vigil::XidSource::kKernelLog,
                        .detail = detail,
                        .gpu_instance = xid.gpu_instance,
                        .compute_instance = xid.compute_instance,
                        .log_position = LogPosition{reading_, record.sequence}});
  ++stats_.xids;
  if (catching_up_) ++stats_.replayed;
  unsettled_.emplace_back(record.sequence, options_.clock->Now());
}

}  // namespace vigil::kmsg

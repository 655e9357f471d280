// The GPU backend interface: where the engine's readings come from (simulated GPUs, or real ones
// through NVML). One backend per engine.
//
// Threading contract: the engine calls ReadAll() (or Read()) from one sampling thread at a time.
// A backend must also allow Read() to run concurrently for different GPUs (DeadlineBackend reads
// every GPU on a worker of its own), never twice at once for the same GPU. A backend delivers
// asynchronous events (XIDs) to its EventSink from a thread of its own, between StartEvents()
// and StopEvents(). ReadProcesses() and ResetGpu() come from one other thread (the engine's
// reset worker), concurrently with reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "backend/mig.h"
#include "fields/gpu_process.h"
#include "fields/value.h"

namespace vigil {

// What a GPU is, as discovered when the backend starts. Stable for the backend's lifetime, but
// for its MIG layout.
struct GpuIdentity {
  uint32_t index = 0;
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;        // model name, e.g. "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;  // "00000000:18:00.0"
  std::string serial;
  std::string driver_version;
  uint64_t memory_total_mib = 0;
  std::string device;  // "nvidia0"
  // MIG mode and the GPU instances, as discovered at start (the only part that may change while
  // the backend runs: Backend::ReadMig() says what it is now).
  MigState mig;
};

// Where a real XID was seen: NVML's event API (the backend's event thread) or the kernel log.
// The driver reports one XID to both; the engine counts it once.
enum class XidSource { kDriverEvents, kKernelLog };

// The XID NVML's event data carries when the driver's code is unknown to it (nvml.h,
// nvmlEventData_t.eventData: "set as 999 for unknown Xid error"); the kernel log has the real code.
inline constexpr uint32_t kUnknownXid = 999;

// A record of the kernel log: the log it was read from (its description: the path, or the
// journal) and its sequence number there. Sequences compare only within one source and boot.
struct LogPosition {
  std::string source;
  uint64_t sequence = 0;
  bool operator==(const LogPosition&) const = default;
};

// An XID reported by the driver (or injected into the engine).
struct XidEvent {
  uint32_t gpu = 0;
  uint32_t xid = 0;
  absl::Time time;
  bool injected = false;
  XidSource source = XidSource::kDriverEvents;
  std::string detail;  // the driver's words, when the source has them (the kernel log)
  // On a GPU in MIG mode, the GPU instance (and compute instance) the XID was raised in, when
  // the source says (NVML's event data; the kernel log's `GPU-I:`).
  std::optional<uint32_t> gpu_instance;
  std::optional<uint32_t> compute_instance;
  // The kernel log's record (source kKernelLog): the incident that counts the XID keeps it, so a
  // restart that reads the log again does not count the XID twice.
  std::optional<LogPosition> log_position;
};

// An error of an NVSwitch (an SXid), from the kernel log: the switch, not a GPU.
struct SxidEvent {
  uint32_t nvswitch = 0;   // N of nvidia-nvswitchN
  std::string pci_bus_id;  // the switch's, "00000000:05:00.0"
  uint32_t sxid = 0;
  bool fatal = false;  // as the driver words it ("Fatal" vs "Non-fatal", "Correctable")
  std::optional<uint32_t> link;
  std::string detail;  // the driver's words
  absl::Time time;
  std::optional<LogPosition> log_position;  // the kernel log's record, as for an XID
};

// Receives a backend's (and the kernel log's) asynchronous events. Implementations must be
// thread-safe and must not block: they are called on the source's thread.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnXid(const XidEvent& event) = 0;
  // Only the kernel log reports these; a sink that has no use for them ignores them.
  virtual void OnSxid(const SxidEvent& event) { (void)event; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "sim" or "nvml".
  virtual std::string_view name() const = 0;

  // The GPUs found at start, indexed by position (gpus()[i].index == i).
  virtual const std::vector<GpuIdentity>& gpus() const = 0;

  // Reads `fields` of GPU `gpu` as of `now` into `out` (out.size() == fields.size(), same order).
  // A field the GPU cannot provide gets a kNotSupported value; any other per-field failure gets
  // its own non-OK status, and the other fields are still read. A non-OK return means the whole
  // GPU could not be read (lost, hung): the engine then marks every field with that failure;
  // the return's code says which (kUnavailable: GPU lost, kDeadlineExceeded: timed out,
  // kPermissionDenied, anything else: read error).
  // Precondition: gpu < gpus().size().
  virtual absl::Status Read(uint32_t gpu, absl::Span<const FieldId> fields, absl::Time now,
                            absl::Span<FieldValue> out) = 0;

  // Reads `fields` of every GPU: GPU g's values go to out[g * fields.size() ...], its Read()
  // status to statuses[g]. The default reads the GPUs one after another.
  // Preconditions: out.size() == gpus().size() * fields.size(), statuses.size() == gpus().size().
  virtual void ReadAll(absl::Span<const FieldId> fields, absl::Time now, absl::Span<FieldValue> out,
                       absl::Span<absl::Status> statuses) {
    for (uint32_t gpu = 0; gpu < statuses.size(); ++gpu) {
      statuses[gpu] = Read(gpu, fields, now, out.subspan(gpu * fields.size(), fields.size()));
    }
  }

  // GPU `gpu`'s MIG mode and instances now, as the driver reports them: an operator may change
  // them while the engine runs. A driver without MIG support reports MIG off, never an error; an
  // error means the state could not be read this time (the engine keeps the last one).
  // Called from the sampling thread. Precondition: gpu < gpus().size().
  virtual absl::StatusOr<MigState> ReadMig(uint32_t gpu) { return gpus()[gpu].mig; }

  // ReadMig of every GPU g with poll[g], into out[g] (the others' entries untouched). The default
  // asks one GPU after another; DeadlineBackend asks them all at once, under one deadline.
  // Preconditions: poll.size() == out.size() == gpus().size(). From the sampling thread.
  virtual void ReadMigAll(const std::vector<bool>& poll, absl::Span<absl::StatusOr<MigState>> out) {
    for (uint32_t gpu = 0; gpu < poll.size(); ++gpu) {
      if (poll[gpu]) out[gpu] = ReadMig(gpu);
    }
  }

  // True once after the driver told of a MIG reconfiguration of any GPU since the last call (the
  // engine then reads the layouts now, not at its next periodic poll). The default: never told.
  // From the sampling thread.
  virtual bool TakeMigChangeNotice() { return false; }

  // Reads `fields` of one GPU instance of GPU `gpu` (one ReadMig() listed) into `out`, as Read()
  // does for the GPU: fields that the driver gives per GPU instance (SampledPerMigInstance), and a
  // kNotSupported value for any it does not. A non-OK return: the instance could not be read at
  // all (gone since ReadMig, or the GPU lost). Called from the sampling thread, after Read() of
  // the same GPU. The default: the backend samples no instance.
  virtual absl::Status ReadInstance(uint32_t gpu, const MigInstance& instance,
                                    absl::Span<const FieldId> fields, absl::Time now,
                                    absl::Span<FieldValue> out) {
    (void)gpu, (void)instance, (void)fields, (void)now;
    for (FieldValue& value : out) value = FieldValue::Error(ValueStatus::kNotSupported);
    return absl::OkStatus();
  }

  // ReadInstance of every instance of every GPU g with read[g]: the instances are `mig[g]`'s, GPU
  // by GPU in their order (MigTable's rows), instance r's values at out[r * fields.size() ...]
  // and its status at statuses[r]; the rows of a GPU not read are untouched. The default reads one
  // after another; DeadlineBackend reads each GPU's instances on its worker, every GPU at once.
  // Preconditions: read.size() == mig.size() == gpus().size(), statuses.size() == the number of
  // instances, out.size() == that times fields.size(). From the sampling thread.
  virtual void ReadInstancesAll(absl::Span<const MigState> mig, const std::vector<bool>& read,
                                absl::Span<const FieldId> fields, absl::Time now,
                                absl::Span<FieldValue> out, absl::Span<absl::Status> statuses) {
    size_t row = 0;
    for (uint32_t gpu = 0; gpu < mig.size(); ++gpu) {
      for (const MigInstance& instance : mig[gpu].instances) {
        if (read[gpu]) {
          statuses[row] = ReadInstance(gpu, instance, fields, now,
                                       out.subspan(row * fields.size(), fields.size()));
        }
        ++row;
      }
    }
  }

  // Starts delivering events to `sink`, which must outlive StopEvents().
  virtual void StartEvents(EventSink* sink) = 0;
  // Stops delivering events; when it returns, no call into the sink is in progress or will come.
  virtual void StopEvents() = 0;

  // The compute processes on GPU `gpu` and its MIG instances, as the driver lists them: a reset
  // needs there to be none, and the per-process series give each one's memory and SM share to
  // its pod. kUnavailable when the GPU is lost (a GPU off the bus cannot say, nor be reset);
  // a driver that cannot say a process's utilisation leaves its sm_util out, never fails the list.
  // Precondition: gpu < gpus().size().
  virtual absl::StatusOr<std::vector<GpuProcess>> ReadProcesses(uint32_t gpu) = 0;

  // ReadProcesses of every GPU g with read[g], into out[g] (the others' entries untouched). The
  // default asks one GPU after another; DeadlineBackend asks them all at once, under one
  // deadline. Preconditions: read.size() == out.size() == gpus().size().
  virtual void ReadProcessesAll(const std::vector<bool>& read,
                                absl::Span<absl::StatusOr<std::vector<GpuProcess>>> out) {
    for (uint32_t gpu = 0; gpu < read.size(); ++gpu) {
      if (read[gpu]) out[gpu] = ReadProcesses(gpu);
    }
  }

  // Resets GPU `gpu` as `nvidia-smi --gpu-reset` does: its volatile counters and its faults end,
  // and the engine sees the reset in them. Returns what the reset printed. Blocks until done (a
  // real reset runs a configured command for up to a minute); never called twice at once.
  // FailedPrecondition (with the reason) when the reset was refused or failed.
  virtual absl::StatusOr<std::string> ResetGpu(uint32_t gpu) = 0;
};

}  // namespace vigil

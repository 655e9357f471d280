// The NVIDIA driver's error lines in the kernel log: XIDs from the GPU driver
//   NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
// and SXids from the NVSwitch driver
//   nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV
//   error
// in every shape the driver branches print (open-gpu-kernel-modules, kernel_rc.c and
// common_nvswitch.h): `pid=N, name=X` (up to R565 always, `pid='<unknown>', name=<unknown>` when
// no process is known), no pid and name (R570 and later when unknown; drivers before about
// R440), `pid=N` alone, no `PCI:` prefix (drivers of around 2012), a MIG instance inside the
// parentheses (`GPU-I:05`, `GPU-I:05 GPU-CI:02`), PCI domains other than 0000 (Grace). The
// fallen-off-the-bus messages that come without an Xid line (the driver's probe routine, R570's
// `NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.`) are XID 79 too. An SXid's follow-up
// lines (`Severity N Engine instance …`, `Data {…}`, printed with the same code) are told apart
// from the error itself. The bus id is returned in DCGM's and NVML's form (`00000000:3B:00.0`:
// 8-digit domain, upper case, the function), which is how the engine names its GPUs. Anything
// else — another driver's line, a line that mentions an XID in passing, garbage — is nothing.
// Samples of every shape, with where each was found, are in driver_line_test.cc.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace vigil::kmsg {

struct DriverXid {
  std::string bus_id;  // "00000000:3B:00.0"
  uint32_t code = 0;
  std::optional<int64_t> pid;                // absent when the driver does not know or does not say
  std::string process;                       // "" when unknown
  std::optional<uint32_t> gpu_instance;      // MIG: `GPU-I:05`
  std::optional<uint32_t> compute_instance;  // MIG: `GPU-CI:02`
  // From a fallen-off-the-bus message rather than an Xid line (the code is then 79).
  bool from_fallen_off_bus_message = false;
  std::string text;  // the driver's words after the code (and pid, name)
};

enum class SxidSeverity { kUnknown, kCorrectable, kNonFatal, kFatal };

enum class SxidLineKind {
  kError,     // "…: 20034, Fatal, Link 48 LTSSM Fault Up": the error itself
  kSeverity,  // "…: 20034, Severity 1 Engine instance 60 Sub-engine instance 00"
  kData,      // "…: 20034, Data {0x10000000, …}"
};

struct DriverSxid {
  uint32_t nvswitch = 0;  // N of nvidia-nvswitchN
  std::string bus_id;     // the switch's, in the same form
  uint32_t code = 0;
  SxidLineKind kind = SxidLineKind::kError;
  SxidSeverity severity = SxidSeverity::kUnknown;  // of a kError line, as the driver words it
  std::optional<uint32_t> link;                    // "Link 48"
  std::string text;                                // after the code (and the severity word)
};

using DriverLine = std::variant<std::monostate, DriverXid, DriverSxid>;

// Parses one kernel log message (a record's MESSAGE, unescaped). Only the driver's own shapes
// match: the message must start with the driver's prefix.
DriverLine ParseDriverLine(std::string_view message);

// "0000:3b:00" or "0000:3b:00.0" (the domain 4 to 8 hex digits) in DCGM's form
// ("00000000:3B:00.0"); nullopt when it is not a PCI address.
std::optional<std::string> NormalizeBusId(std::string_view bus_id);

}  // namespace vigil::kmsg

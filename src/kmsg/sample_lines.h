// Real lines of the NVIDIA driver from the kernel log, each with where it was found and what it
// says (code, GPU, process), for the parser's tests, its fuzz test (the seeds it mutates) and its
// benchmark. The timestamps and host prefixes that dmesg or journald added are removed: a kernel
// log record holds the message alone. Test data; no code.
#pragma once

#include <cstdint>
#include <optional>

namespace vigil::kmsg {

struct XidSample {
  const char* source;
  const char* line;
  const char* bus_id;
  uint32_t code;
  std::optional<int64_t> pid;
  const char* process;
  const char* text_starts;
};

inline const XidSample kXidSamples[] = {
    // pid and name (drivers up to R565 with a process; later drivers when one is known).
    {"NVIDIA/open-gpu-kernel-modules#1030 (595.71.05)",
     "NVRM: Xid (PCI:0000:01:00): 31, pid=13705, name=UnrealEditor, channel 0x0000000c, intr "
     "00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_PROP_0 faulted @ 0x0_00000000. Fault is "
     "of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
     "00000000:01:00.0", 31, 13705, "UnrealEditor", "channel 0x0000000c"},
    {"sgl-project/sglang#29160",
     "NVRM: Xid (PCI:0000:70:00): 31, pid=684430, name=python3, channel 0x00000002, intr 00000000. "
     "MMU Fault: ENGINE GRAPHICS GPC1 UNRECOGNIZED_CLIENT faulted @ 0x1827f9_000b4bc0. Fault is of "
     "type UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE",
     "00000000:70:00.0", 31, 684430, "python3", "channel 0x00000002"},
    {"leptonai/gpud testdata/dmesg-with-xid-119.log (Dell XE9680)",
     "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting "
     "for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
     "00000000:9B:00.0", 119, 2024380, "nvidia-smi", "Timeout after 6s"},
    {"leptonai/gpud testdata/dmesg.decode.iso.log",
     "NVRM: Xid (PCI:0000:38:00): 43, pid=2924364, name=pt_main_thread, Ch 00000008",
     "00000000:38:00.0", 43, 2924364, "pt_main_thread", "Ch 00000008"},
    {"NVIDIA/open-gpu-kernel-modules#1150 (590.48.01): XID 45 with its root cause",
     "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous "
     "Xid 149",
     "00000000:DC:00.0", 45, 1818990, "python3", "Ch 00000001 caused by previous Xid 149"},
    {"kubernetes-sigs/dra-driver-nvidia-gpu#904 (Grace, domain 0009)",
     "NVRM: Xid (PCI:0009:01:00): 43, pid=3188489, name=trigger_xid, channel 0x0b00000a",
     "00000009:01:00.0", 43, 3188489, "trigger_xid", "channel 0x0b00000a"},
    {"leptonai/gpud kmsg_extended_test.go: a process name with '::'",
     "NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 "
     "i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
     "00000018:01:00.0", 145, 876767, "ray::WorkerDict", "RLW_RXPIPE Nonfatal XC0 i0 Link 13"},
    {"NVIDIA/NVSentinel csv_test.go: a process name with '.'",
     "NVRM: Xid (PCI:0000:66:00): 32, pid=2280636, name=train.3, Channel ID 0000000d intr0 "
     "00040000",
     "00000000:66:00.0", 32, 2280636, "train.3", "Channel ID 0000000d"},
    // pid='<unknown>', name=<unknown> (R515-R565 without a process).
    {"akash-network/support#209 (535.161.07)",
     "NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
     "00000000:A1:00.0", 79, std::nullopt, "", "GPU has fallen off the bus."},
    {"leptonai/gpud testdata/dmesg.decode.iso.log",
     "NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Global "
     "Exception "
     "on (GPC 8, TPC 5, SM 1): Multiple Warp Errors",
     "00000000:38:00.0", 13, std::nullopt, "", "Graphics SM Global Exception"},
    {"NVIDIA/NVSentinel csv_test.go: NVLink XID 74, domain 0003",
     "NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error "
     "detected "
     "on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
     "00000003:00:00.0", 74, std::nullopt, "", "NVLink: fatal error detected on link 14"},
    // No pid and name (R570 and later without a process).
    {"NVIDIA/NVSentinel#155", "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus",
     "00000000:44:00.0", 79, std::nullopt, "", "GPU has fallen off the bus"},
    {"leptonai/gpud kmsg_test.go (GB200): XID 154",
     "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain "
     "and Reset)",
     "00000009:01:00.0", 154, std::nullopt, "", "GPU recovery action changed from 0x0 (None)"},
    {"leptonai/gpud kmsg_test.go (GB200): the NVLink5 format with its padding",
     "NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 "
     "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
     "00000009:01:00.0", 149, std::nullopt, "", "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01"},
    {"leptonai/gpud kmsg_extended_test.go: Link -1",
     "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 "
     "0x00000000 "
     "0x00000000 0x00000000 0x00000000)",
     "00000019:01:00.0", 149, std::nullopt, "", "NETIR Fatal XC0 i0 Link -1"},
    {"flashinfer-ai/flashinfer#3869 (580.82.07)",
     "NVRM: Xid (PCI:0000:1a:00): 13, Graphics Exception: ESR 0x57e7b0=0x81e0017 0x57e7b4=0x24 "
     "0x57e7a8=0x1f81fb60 0x57e7ac=0x1174",
     "00000000:1A:00.0", 13, std::nullopt, "", "Graphics Exception: ESR"},
    // pid without a name, and the device number not 00.
    {"stas00/ml-engineering compute/accelerator/nvidia/debug.md",
     "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset "
     "gpu to activate.",
     "00000000:10:1C.0", 63, 1896, "", "Row Remapper: New row marked"},
    {"NVIDIA open-gpu-kernel-modules kern_gpu_error_cont_ga100.c (NVIDIA's example)",
     "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: "
     "No",
     "00000000:01:00.0", 95, 7062, "", "Uncontained: LTC TAG"},
    // No pid at all, and no PCI: prefix (old drivers).
    {"doitsujin/dxvk#1027 (418)",
     "NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000052 intr 02000000", "00000000:01:00.0", 32,
     std::nullopt, "", "Channel ID 00000052"},
    {"pastebin.com/NGng33SB (about 2012)",
     "NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000", "00000000:01:00.0",
     31, std::nullopt, "", "Ch 0000000b"},
    // The fallen-off-the-bus messages.
    {"akash-network/support#209 (535.161.07): beside the Xid line",
     "NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.", "00000000:A1:00.0", 79, std::nullopt,
     "", "GPU has fallen off the bus."},
    {"NVIDIA/NVSentinel#155 (570.158.01): the probe routine's message, one record, no Xid line",
     "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\n"
     "NVRM: fallen off the bus and is not responding to commands.",
     "00000000:B3:00.0", 79, std::nullopt, "", "GPU has fallen off the bus."},
};

// SXid lines (leptonai/gpud sxid/README.md, a stored chat log, the driver's formats).
inline const char* const kSxidLines[] = {
    "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up",
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine "
    "instance 00",
    "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 22013, Non-fatal, Link 60 Minion Link DLREQ "
    "interrupt",
};

// Kernel log lines around the driver's that are not XIDs (the same sources).
inline const char* const kOtherLines[] = {
    "NVRM: GPU at PCI:0000:a1:00: GPU-979426f2-893a-7cbb-c4cf-81472f89a462",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 22:55:48 UTC 2024",
    "nvidia-nvswitch2: open (major=510)",
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "pcieport 0000:04:02.0: Unable to change power state from D3hot to D0, device inaccessible",
};

}  // namespace vigil::kmsg

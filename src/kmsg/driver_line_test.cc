// Tests of the driver-line parser on a corpus of real lines: XIDs in every shape the driver
// branches print, SXids with their follow-up lines, the fallen-off-the-bus messages, and
// look-alike lines that must parse to nothing. Each sample names where it was found; the
// timestamps and host prefixes that dmesg or journald added are removed (the kernel log's
// record has the message alone).
#include "kmsg/driver_line.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::kmsg {
namespace {

struct XidSample {
  const char* source;
  const char* line;
  const char* bus_id;
  uint32_t code;
  std::optional<int64_t> pid;
  const char* process;
  const char* text_starts;
};

const XidSample kXids[] = {
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

TEST(DriverLineTest, RealXidLinesParseToTheirCodeAndGpu) {
  for (const XidSample& sample : kXids) {
    SCOPED_TRACE(std::string(sample.source) + ": " + sample.line);
    const DriverLine parsed = ParseDriverLine(sample.line);
    ASSERT_TRUE(std::holds_alternative<DriverXid>(parsed));
    const DriverXid& xid = std::get<DriverXid>(parsed);
    EXPECT_EQ(xid.bus_id, sample.bus_id);
    EXPECT_EQ(xid.code, sample.code);
    EXPECT_EQ(xid.pid, sample.pid);
    EXPECT_EQ(xid.process, sample.process);
    EXPECT_THAT(xid.text, ::testing::StartsWith(sample.text_starts));
    EXPECT_FALSE(xid.gpu_instance.has_value());
  }
}

TEST(DriverLineTest, MigLinesNameTheInstance) {
  // NVIDIA's examples in kern_gpu_error_cont_ga100.c and the formats in kernel_rc.c.
  DriverLine parsed = ParseDriverLine(
      "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: "
      "No, D-RST: No");
  ASSERT_TRUE(std::holds_alternative<DriverXid>(parsed));
  EXPECT_EQ(std::get<DriverXid>(parsed).bus_id, "00000000:01:00.0");
  EXPECT_EQ(std::get<DriverXid>(parsed).code, 94u);
  EXPECT_EQ(std::get<DriverXid>(parsed).gpu_instance, 5u);
  EXPECT_FALSE(std::get<DriverXid>(parsed).compute_instance.has_value());
  parsed = ParseDriverLine(
      "NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:02): 31, pid=7194, name=python3, Ch 00000008");
  ASSERT_TRUE(std::holds_alternative<DriverXid>(parsed));
  EXPECT_EQ(std::get<DriverXid>(parsed).gpu_instance, 5u);
  EXPECT_EQ(std::get<DriverXid>(parsed).compute_instance, 2u);
  EXPECT_EQ(std::get<DriverXid>(parsed).process, "python3");
}

TEST(DriverLineTest, SxidLinesAndTheirFollowUps) {
  struct Sample {
    const char* source;
    const char* line;
    uint32_t nvswitch;
    const char* bus_id;
    uint32_t code;
    SxidLineKind kind;
    SxidSeverity severity;
    std::optional<uint32_t> link;
  };
  const Sample samples[] = {
      {"leptonai/gpud sxid/README.md (HGX)",
       "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up", 1,
       "00000000:06:00.0", 20034, SxidLineKind::kError, SxidSeverity::kFatal, 48},
      {"leptonai/gpud sxid/README.md (HGX)",
       "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine "
       "instance 00",
       2, "00000000:07:00.0", 20034, SxidLineKind::kSeverity, SxidSeverity::kUnknown, std::nullopt},
      {"leptonai/gpud sxid/README.md (HGX)",
       "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x10000000, "
       "0x00000000, 0x10000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}",
       0, "00000000:05:00.0", 20034, SxidLineKind::kData, SxidSeverity::kUnknown, std::nullopt},
      {"a stored chat log: one group of three",
       "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 22013, Non-fatal, Link 60 Minion Link DLREQ "
       "interrupt",
       3, "00000000:08:00.0", 22013, SxidLineKind::kError, SxidSeverity::kNonFatal, 60},
      {"leptonai/gpud sxid/kmsg.go: (First)",
       "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted "
       "PRIV error (First)",
       3, "00000000:05:00.0", 12028, SxidLineKind::kError, SxidSeverity::kNonFatal, 32},
      {"the driver's format (intr_nvswitch.h): Correctable",
       "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 19049, Correctable, Link 05 SBE", 0,
       "00000000:C2:00.0", 19049, SxidLineKind::kError, SxidSeverity::kCorrectable, 5},
      {"the driver's format (common_nvswitch.h): a code below 10000 is zero-padded",
       "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 01234, Fatal, unhandled interrupt in x(1)", 0,
       "00000000:C2:00.0", 1234, SxidLineKind::kError, SxidSeverity::kFatal, std::nullopt},
  };
  for (const Sample& sample : samples) {
    SCOPED_TRACE(std::string(sample.source) + ": " + sample.line);
    const DriverLine parsed = ParseDriverLine(sample.line);
    ASSERT_TRUE(std::holds_alternative<DriverSxid>(parsed));
    const DriverSxid& sxid = std::get<DriverSxid>(parsed);
    EXPECT_EQ(sxid.nvswitch, sample.nvswitch);
    EXPECT_EQ(sxid.bus_id, sample.bus_id);
    EXPECT_EQ(sxid.code, sample.code);
    EXPECT_EQ(sxid.kind, sample.kind);
    EXPECT_EQ(sxid.severity, sample.severity);
    EXPECT_EQ(sxid.link, sample.link);
  }
}

TEST(DriverLineTest, LookAlikesAreNothing) {
  const char* lines[] = {
      // The driver's other lines (akash-network/support#209, gpud testdata, fnOS blog).
      "NVRM: GPU at PCI:0000:a1:00: GPU-979426f2-893a-7cbb-c4cf-81472f89a462",
      "NVRM: GPU Board Serial Number: 1650124014249",
      "NVRM: GPU 0000:91:00.0: GPU serial number is 1653723052734.",
      "NVRM: A GPU crash dump has been created. If possible, please run\nNVRM: "
      "nvidia-bug-report.sh "
      "as root to collect this data before\nNVRM: the NVIDIA kernel module is unloaded.",
      "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 22:55:48 UTC 2024",
      "NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every "
      "30).  "
      "The GPU likely needs to be reset.",
      "NVRM: GPU4 RPC history (CPU -> GSP):",
      "nvrm-nvlog: CwAAAAAECAAIAQQCAAAAAAAAAAAdklRmGCSHamm5x7t02nF+AAAAAAAAAAAAAAAA",
      "nvidia-nvswitch2: open (major=510)",
      "nvidia: probe of 0000:5d:00.0 failed with error -1",
      "NVRM: The NVIDIA probe routine failed for 1 device(s).",
      // An XID named inside another message, and lines cut or mangled.
      "python[1234]: saw NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
      " NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
      "NVRM: Xid (PCI:0000:08:00): 13, pid='<unknown>', name=<unknown>, Graphi>",  // cut: still 13
      "NVRM: Xid (PCI:0000:3b:00",
      "NVRM: Xid (PCI:0000:3b:00): ",
      "NVRM: Xid (PCI:0000:3b:00): 0, zero is no XID",
      "NVRM: Xid (PCI:0000:3b:00): 999999, too large",
      "NVRM: Xid (PCI:00:3b:00): 79, domain too short",
      "NVRM: Xid (PCI:0000:3b:0): 79, device too short",
      "NVRM: Xid (PCI:0000:zz:00): 79, not hex",
      "NVRM: Xid (PCI:0000:3b:00 GPU-X:05): 79, not a MIG instance",
      "NVRM: Xid (PCI:0000:3b:00):79x",
      "NVRM: Xid (PCI:0000:3b:00): 79, pid=abc, name=x, bad pid",
      "nvidia-nvswitch: SXid (PCI:0000:06:00.0): 20034, Fatal, no switch number",
      "nvidia-nvswitch1: SXid (PCI:0000:06:00.0 GPU-I:01): 20034, Fatal, an instance",
      "",
  };
  int parsed_as_xid = 0;
  for (const char* line : lines) {
    const DriverLine parsed = ParseDriverLine(line);
    if (std::holds_alternative<DriverXid>(parsed)) {
      ++parsed_as_xid;
      // Only the cut line is an XID (its code and bus id are whole).
      EXPECT_EQ(std::get<DriverXid>(parsed).code, 13u) << line;
    } else {
      EXPECT_TRUE(std::holds_alternative<std::monostate>(parsed)) << line;
    }
  }
  EXPECT_EQ(parsed_as_xid, 1);
}

TEST(DriverLineTest, BusIdsInDcgmForm) {
  EXPECT_EQ(NormalizeBusId("0000:3b:00"), "00000000:3B:00.0");
  EXPECT_EQ(NormalizeBusId("0009:01:00.1"), "00000009:01:00.1");
  EXPECT_EQ(NormalizeBusId("00000000:3B:00.0"), "00000000:3B:00.0");
  EXPECT_EQ(NormalizeBusId("3b:00.0"), std::nullopt);
  EXPECT_EQ(NormalizeBusId("0000:3b:00.8"), std::nullopt);
  EXPECT_EQ(NormalizeBusId("000000000:3b:00"), std::nullopt);
}

}  // namespace
}  // namespace vigil::kmsg

// Tests of the driver-line parser on a corpus of real lines: XIDs in every shape the driver
// branches print, SXids with their follow-up lines, the fallen-off-the-bus messages, and
// look-alike lines that must parse to nothing. Each sample names where it was found; the
// timestamps and host prefixes that dmesg or journald added are removed (the kernel log's
// record has the message alone).
#include "kmsg/driver_line.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kmsg/sample_lines.h"

namespace vigil::kmsg {
namespace {

TEST(DriverLineTest, RealXidLinesParseToTheirCodeAndGpu) {
  for (const XidSample& sample : kXidSamples) {
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

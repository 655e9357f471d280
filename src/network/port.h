// A NIC port as the kernel's InfiniBand sysfs class describes it (an InfiniBand port, or a RoCE
// port of an Ethernet NIC that the RDMA stack drives), and the parsers of the files it is read
// from. The file formats are the kernel's (drivers/infiniband/core/sysfs.c: state_show,
// phys_state_show, rate_show; Documentation/ABI/stable/sysfs-class-infiniband); docs/network.md
// cites each. Plain values and pure functions: thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil::network {

// The port's logical state, numbered as the InfiniBand specification (and the kernel's
// `enum ib_port_state`) numbers it: the number is what sysfs prints before the name.
enum class PortState : uint8_t {
  kNop = 0,
  kDown = 1,
  kInit = 2,
  kArmed = 3,
  kActive = 4,
  kActiveDefer = 5,
};

// The port's physical state (`enum ib_port_phys_state`), numbered as sysfs prints it.
enum class PhysState : uint8_t {
  kSleep = 1,
  kPolling = 2,
  kDisabled = 3,
  kPortConfigurationTraining = 4,
  kLinkUp = 5,
  kLinkErrorRecovery = 6,
  kPhyTest = 7,
};

enum class LinkLayer : uint8_t { kInfiniBand, kEthernet };

std::string_view PortStateName(PortState state);  // "ACTIVE", as sysfs spells it
std::string_view PhysStateName(PhysState state);  // "LinkUp", as sysfs spells it
std::string_view LinkLayerName(LinkLayer layer);  // "InfiniBand" or "Ethernet"

// The signalling rate: "200 Gb/sec (4X HDR)" is 200 Gb/s over 4 lanes of HDR.
struct PortRate {
  double gbps = 0;     // the data rate the port trained at, Gb/s (2.5 for "2.5 Gb/sec")
  uint32_t lanes = 0;  // the link width: 1, 2, 4, 8 or 12
  std::string speed;   // the lane speed's name ("HDR", "NDR", ...), "" where sysfs gives none

  bool operator==(const PortRate&) const = default;
};

// Each parser takes a file's whole contents (its trailing newline included) and returns
// InvalidArgument naming what it expected, never a guess.
absl::StatusOr<PortState> ParsePortState(std::string_view text);  // "4: ACTIVE\n"
absl::StatusOr<PhysState> ParsePhysState(std::string_view text);  // "5: LinkUp\n"
absl::StatusOr<PortRate> ParsePortRate(std::string_view text);    // "200 Gb/sec (4X HDR)\n"
absl::StatusOr<LinkLayer> ParseLinkLayer(std::string_view text);  // "InfiniBand\n"
// A counter file ("1234\n"): an unsigned decimal that fits 64 bits.
absl::StatusOr<uint64_t> ParseCounter(std::string_view text);
// /sys/class/net/IF/speed: Mb/s, or nullopt where the kernel prints -1 (no link, or unknown).
absl::StatusOr<std::optional<int64_t>> ParseNetSpeed(std::string_view text);
// /sys/class/net/IF/carrier: "1" or "0".
absl::StatusOr<bool> ParseCarrier(std::string_view text);

// The Ethernet device the RDMA stack drives a RoCE port through, as /sys/class/net shows it.
struct NetDevice {
  std::string name;                   // "ens1f0np0"
  std::optional<bool> carrier;        // nullopt where unreadable (the interface is down)
  std::optional<int64_t> speed_mbps;  // nullopt where unknown
  std::optional<int64_t> mtu;

  bool operator==(const NetDevice&) const = default;
};

// One port, as read at one time. A file that could not be read or parsed leaves its value unset
// and one line in the problems of its read: a port is never judged from a value it did not have.
struct NicPort {
  std::string device;      // the HCA: "mlx5_0"
  uint32_t port = 0;       // 1-based, as sysfs numbers them
  std::string pci_bus_id;  // the HCA's PCI function, "0000:17:00.0"; "" where sysfs has no link
  std::optional<LinkLayer> link_layer;
  std::optional<PortState> state;
  std::optional<PhysState> phys_state;
  std::optional<PortRate> rate;
  std::optional<NetDevice> net;  // RoCE ports: the netdev the port runs over
  // counters/ and hw_counters/, by file name ("symbol_error", "link_downed", "out_of_buffer").
  std::map<std::string, uint64_t> counters;
  std::vector<std::string> state_problems;    // of the last state read
  std::vector<std::string> counter_problems;  // of the last counters read
  // The fields whose value is injected, not read ("state", "link_downed"; the monitor applies an
  // operator's injections to what it reads), sorted.
  std::vector<std::string> injected;

  // "mlx5_0/1": how logs, discovery and labels name the port.
  std::string Name() const;
};

}  // namespace vigil::network

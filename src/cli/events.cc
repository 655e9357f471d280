// `vigil events`: the engine's event stream, live — XIDs, injections with who made them, their
// expiry and clearing, scenario steps. Starts with recent events; follows engine restarts.
#include <iostream>

#include "api/convert.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/status.h"
#include "fmt/format.h"

namespace vigil::cli {
namespace {

struct EventsFlags {
  ClientFlags client;
  uint32_t recent = 20;
  int64_t count = 0;
  bool no_follow = false;
};

void PrintEvent(const EventsFlags& flags, const v1::Event& e) {
  if (flags.client.json) {
    nlohmann::json json = {{"id", e.id()},
                           {"instance_id", e.instance_id()},
                           {"time", FormatTimeUs(e.time_us())},
                           {"seq", e.seq()},
                           {"kind", v1::Event::Kind_Name(e.kind())},
                           {"gpu", e.gpu()},
                           {"xid", e.xid()},
                           {"injected", e.injected()},
                           {"message", e.message()},
                           {"injection_id", e.injection().id()},
                           {"who", e.principal().description()},
                           {"uid", e.has_principal() ? e.principal().uid() : -1}};
    if (e.has_xid_info()) {  // the engine's policy for the code, as it applied it
      const v1::XidInfo& xid = e.xid_info();
      json["xid_info"] = {
          {"known", xid.known()},
          {"meaning", xid.meaning()},
          {"severity", XidSeverityText(xid.severity())},
          {"system", xid.system()},
          {"code", xid.code()},
          {"action", xid.action()},
          {"recommended_action", std::string(RecommendedActionText(xid.recommended_action()))}};
    }
    if (e.has_sxid()) {
      const v1::SxidInfo& sxid = e.sxid();
      json["sxid"] = {{"nvswitch", sxid.nvswitch()},
                      {"pci_bus_id", sxid.pci_bus_id()},
                      {"code", sxid.code()},
                      {"fatal", sxid.fatal()},
                      {"link", sxid.link()}};
    }
    std::cout << json.dump() << std::endl;
    return;
  }
  std::string meaning;
  if (e.has_xid_info()) {
    meaning = fmt::format(
        " [{}; {}]",
        e.xid_info().known() ? e.xid_info().meaning() : "not in the engine's XID policy",
        XidSeverityText(e.xid_info().severity()));
  }
  std::cout << fmt::format("{}  seq {:<6} {:<18} {}{}{}", FormatTimeUs(e.time_us()), e.seq(),
                           v1::Event::Kind_Name(e.kind()), e.message(), meaning,
                           e.has_principal() ? " — by " + e.principal().description() : "")
            << std::endl;
}

int RunEvents(const EventsFlags& flags) {
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("events", client.status());
  if (flags.no_follow) {
    v1::ListEventsRequest list_request;
    list_request.set_recent(flags.recent);
    auto events = (*client)->ListEvents(list_request);
    if (!events.ok()) return Fail("events", events.status());
    for (const v1::Event& event : events->events()) PrintEvent(flags, event);
    return kExitOk;
  }
  auto info = (*client)->GetEngineInfo();  // fail fast when the engine is not there
  if (!info.ok()) return Fail("events", info.status());
  v1::WatchEventsRequest request;
  request.set_recent(flags.recent);
  auto stream = (*client)->WatchEvents(request);
  int64_t printed = 0;
  bool disconnected = false;
  ReplayedEvents replayed;  // a reconnect to the same engine replays what was printed
  while (flags.count == 0 || printed < flags.count) {
    auto event = stream->Next();
    if (event.kind == EventSubscription::Event::kRejected) return Fail("events", event.error);
    if (event.kind == EventSubscription::Event::kCancelled) break;
    if (event.kind == EventSubscription::Event::kDisconnected) {
      if (!disconnected) {
        std::cerr << "vigil events: " << MessageOf(event.error) << "; reconnecting" << std::endl;
        disconnected = true;
      }
      continue;
    }
    const v1::Event& e = *event.message;
    if (!replayed.See(e).fresh) continue;
    if (disconnected || event.new_instance) {
      std::cerr << "vigil events: connected to engine instance " << e.instance_id()
                << (event.new_instance ? " (the engine restarted)" : "") << std::endl;
      disconnected = false;
    }
    ++printed;
    PrintEvent(flags, e);
  }
  return kExitOk;
}

}  // namespace

CommandRunner AddEventsCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "events", "Follow the engine's events: XIDs, injections (who, what, when), scenarios");
  auto flags = std::make_shared<EventsFlags>();
  AddClientFlags(command, &flags->client);
  command->add_option("--recent", flags->recent, "Past events to show first")
      ->check(CLI::Range(0u, 1000u))
      ->capture_default_str();
  command->add_flag("--no-follow", flags->no_follow, "Print the recent events and exit");
  command->add_option("-c,--count", flags->count, "Stop after this many events (0: follow)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}))
      ->capture_default_str();
  return [flags] { return RunEvents(*flags); };
}

}  // namespace vigil::cli

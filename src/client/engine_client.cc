// Implements EngineClient and TickSubscription over gRPC's synchronous API.
#include "client/engine_client.h"

#include "common/status.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace vigil {

namespace {

// What a failed TLS handshake means, from gRPC's words for it; "" when `detail` is no such failure.
std::string TlsFailure(const std::string& detail, const std::string& address) {
  if (detail.find("certificate verify failed") != std::string::npos) {
    return fmt::format(
        "the engine's certificate at {} is not signed by a CA this client trusts (--tls-ca, else "
        "the system's roots), or has expired",
        address);
  }
  if (detail.find("Hostname Verification") != std::string::npos) {
    return fmt::format(
        "the engine's certificate at {} does not name the host dialled: give --tls-server-name "
        "with a name it carries (a DNS or IP subject alternative name)",
        address);
  }
  if (detail.find("andshake") != std::string::npos ||
      detail.find("Socket closed") != std::string::npos) {
    return fmt::format(
        "the engine at {} ended the TLS handshake: does it require a client certificate "
        "(--tls-cert, --tls-key) signed by its --tls-client-ca? Is it listening with TLS?",
        address);
  }
  return "";
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& status, const std::string& address) {
  if (status.ok()) return absl::OkStatus();
  const std::string detail = status.error_message();
  if (address.starts_with("tls://") && (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                        status.error_code() == grpc::StatusCode::UNKNOWN)) {
    if (const std::string failure = TlsFailure(detail, address); !failure.empty()) {
      return absl::UnavailableError(fmt::format("{} ({})", failure, detail));
    }
  }
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(fmt::format(
          "the engine at {} is unreachable ({}): is `vigil engine` running there? Set --engine or "
          "VIGIL_ENGINE to its address",
          address, detail));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(
          fmt::format("the engine at {} did not answer in time ({})", address, detail));
    case grpc::StatusCode::UNIMPLEMENTED:
      return absl::UnimplementedError(fmt::format(
          "the engine at {} does not support this call ({}): is it an older vigil version?",
          address, detail));
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()), detail);
  }
}

absl::StatusOr<std::unique_ptr<EngineClient>> EngineClient::Create(std::string_view address,
                                                                   ClientOptions options) {
  auto parsed = ParseEngineAddress(address);
  if (!parsed.ok()) return parsed.status();
  grpc::ChannelArguments args;
  // Notice a dead engine within seconds on an idle subscription, and find it again promptly once
  // it is back (gRPC's default reconnect backoff grows to two minutes; a node-local engine is
  // worth a connect() twice a second).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // gRPC reads this one as the least time a connection attempt is given (TCP and the TLS
  // handshake): at 100 ms a handshake with an engine on a loaded node was cut short ("handshaker
  // shutdown") and a one-shot command failed. A refused connect still fails at once, so a dead
  // engine is retried as often as before.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5'000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.reconnect_backoff_max)));
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (parsed->tls || options.tls.enabled) {
    if (parsed->is_unix) {
      return absl::InvalidArgumentError(fmt::format(
          "--tls-* flags are for the engine's TCP listener, not its Unix socket {}: drop them, or "
          "give --engine tls://HOST:PORT",
          parsed->display));
    }
    auto secure = tls::MakeChannelCredentials(options.tls, absl::Now());
    if (!secure.ok()) return secure.status();
    credentials = *std::move(secure);
    if (!options.tls.server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls.server_name);
    }
  }
  auto channel = grpc::CreateCustomChannel(parsed->target, credentials, args);
  // Messages say tls:// whenever the channel is TLS, however the address was written.
  std::string display = parsed->display;
  if ((parsed->tls || options.tls.enabled) && !display.starts_with("tls://")) {
    display = "tls://" + display;
  }
  return std::make_unique<EngineClient>(std::move(channel), std::move(display), options);
}

EngineClient::EngineClient(std::shared_ptr<grpc::Channel> channel, std::string display,
                           ClientOptions options)
    : channel_(std::move(channel)),
      stub_(v1::Engine::NewStub(channel_)),
      display_(std::move(display)),
      options_(options) {}

std::unique_ptr<grpc::ClientContext> EngineClient::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  if (!options_.token.empty()) context->AddMetadata("authorization", "Bearer " + options_.token);
  return context;
}

namespace {

template <typename Response, typename Call>
absl::StatusOr<Response> Unary(const std::string& address,
                               std::unique_ptr<grpc::ClientContext> context, Call call) {
  Response response;
  const grpc::Status status = call(context.get(), &response);
  if (!status.ok()) return FromGrpc(status, address);
  return response;
}

}  // namespace

absl::StatusOr<v1::EngineInfo> EngineClient::GetEngineInfo() {
  return Unary<v1::EngineInfo>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->GetEngineInfo(context, v1::GetEngineInfoRequest(), response);
  });
}

absl::StatusOr<v1::ListGpusResponse> EngineClient::ListGpus() {
  return Unary<v1::ListGpusResponse>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->ListGpus(context, v1::ListGpusRequest(), response);
  });
}

absl::StatusOr<v1::ListFieldsResponse> EngineClient::ListFields() {
  return Unary<v1::ListFieldsResponse>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->ListFields(context, v1::ListFieldsRequest(), response);
  });
}

absl::StatusOr<v1::GetLatestValuesResponse> EngineClient::GetLatestValues(
    const v1::GetLatestValuesRequest& request) {
  return Unary<v1::GetLatestValuesResponse>(
      display_, NewContext(), [&](auto* context, auto* response) {
        return stub_->GetLatestValues(context, request, response);
      });
}

absl::StatusOr<v1::GetHistoryResponse> EngineClient::GetHistory(
    const v1::GetHistoryRequest& request) {
  return Unary<v1::GetHistoryResponse>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->GetHistory(context, request, response);
  });
}

std::unique_ptr<TickSubscription> EngineClient::Subscribe(v1::SubscribeRequest request) {
  return std::make_unique<TickSubscription>(
      display_,
      [this, request = std::move(request)](grpc::ClientContext* context) {
        return stub_->Subscribe(context, request);
      },
      options_.clock);
}

std::unique_ptr<EventSubscription> EngineClient::WatchEvents(v1::WatchEventsRequest request) {
  return std::make_unique<EventSubscription>(
      display_,
      [this, request = std::move(request)](grpc::ClientContext* context) {
        return stub_->WatchEvents(context, request);
      },
      options_.clock);
}

absl::StatusOr<v1::ListEventsResponse> EngineClient::ListEvents(
    const v1::ListEventsRequest& request) {
  return Unary<v1::ListEventsResponse>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->ListEvents(context, request, response);
  });
}

absl::StatusOr<v1::Injection> EngineClient::InjectField(const v1::InjectFieldRequest& request) {
  return Unary<v1::Injection>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->InjectField(context, request, response);
  });
}

absl::StatusOr<v1::InjectXidResponse> EngineClient::InjectXid(const v1::InjectXidRequest& request) {
  return Unary<v1::InjectXidResponse>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->InjectXid(context, request, response);
  });
}

absl::StatusOr<v1::Scenario> EngineClient::RunScenario(const v1::RunScenarioRequest& request) {
  return Unary<v1::Scenario>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->RunScenario(context, request, response);
  });
}

absl::StatusOr<v1::ClearInjectionsResponse> EngineClient::ClearInjections(
    const v1::ClearInjectionsRequest& request) {
  return Unary<v1::ClearInjectionsResponse>(
      display_, NewContext(), [&](auto* context, auto* response) {
        return stub_->ClearInjections(context, request, response);
      });
}

absl::StatusOr<v1::ListInjectionsResponse> EngineClient::ListInjections() {
  return Unary<v1::ListInjectionsResponse>(
      display_, NewContext(), [&](auto* context, auto* response) {
        return stub_->ListInjections(context, v1::ListInjectionsRequest(), response);
      });
}

absl::StatusOr<v1::HealthVerdict> EngineClient::GetHealth(const v1::GetHealthRequest& request) {
  return Unary<v1::HealthVerdict>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->GetHealth(context, request, response);
  });
}

std::unique_ptr<HealthSubscription> EngineClient::WatchHealth(v1::WatchHealthRequest request) {
  return std::make_unique<HealthSubscription>(
      display_,
      [this, request = std::move(request)](grpc::ClientContext* context) {
        return stub_->WatchHealth(context, request);
      },
      options_.clock);
}

absl::StatusOr<v1::ClearHealthResponse> EngineClient::ClearHealth(
    const v1::ClearHealthRequest& request) {
  return Unary<v1::ClearHealthResponse>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->ClearHealth(context, request, response);
  });
}

absl::StatusOr<v1::ResetGpuResponse> EngineClient::ResetGpu(const v1::ResetGpuRequest& request) {
  return Unary<v1::ResetGpuResponse>(display_, NewContext(), [&](auto* context, auto* response) {
    return stub_->ResetGpu(context, request, response);
  });
}

}  // namespace vigil

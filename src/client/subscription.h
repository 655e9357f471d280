// A server stream from the engine (ticks, events) that survives engine restarts and tells the
// reader when the engine instance changed.
//
// Coming back fast after a restart: the first open reports a missing engine at once; after a
// disconnect, the stream is reopened with wait_for_ready, so it waits inside gRPC for the engine
// to be back and opens the moment the channel connects (the channel retries on its own backoff,
// capped by ClientOptions::reconnect_backoff_max). Our own jittered backoff only spaces out
// opens that the engine answers and then ends at once (an engine shutting down), so the two
// delays never add up while the engine is away, and nothing spins against an engine that is gone.
//
// Next() blocks for the next event:
// - kMessage: `message` points to the message, valid until the next call to Next() (it is reused,
//   so a reader does not allocate per message); `new_instance` is true on the first message from
//   an engine instance other than the previous one (the engine restarted: its caches were rebuilt
//   and seq started again).
// - kDisconnected: the stream broke or could not be opened; `error` says why. The next Next()
//   waits a backoff delay, then blocks until the engine is back (or Cancel()).
// - kRejected: the engine refused the request (bad argument, permission): retrying cannot help.
// - kCancelled: Cancel() was called.
// Thread-safety: Next() from one thread; Cancel() from any.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "fmt/format.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"

namespace vigil {

// grpc::Status -> absl::Status with a message for people (see engine_client.cc).
absl::Status FromGrpc(const grpc::Status& status, const std::string& address);

template <typename Message>
class Subscription {
 public:
  using Opener =
      std::function<std::unique_ptr<grpc::ClientReader<Message>>(grpc::ClientContext* context)>;

  struct Event {
    enum Kind { kMessage, kDisconnected, kRejected, kCancelled } kind = kCancelled;
    const Message* message = nullptr;
    bool new_instance = false;
    absl::Status error;
  };

  // Between an open the engine ended at once and the next: 100 ms doubling to 1 s.
  static constexpr BackoffPolicy kReopenBackoff{.initial = absl::Milliseconds(100),
                                                .max = absl::Seconds(1)};

  // `open` starts the stream on a fresh context; `address` names the engine in messages.
  // `clock` (not owned) times the reopen backoff.
  Subscription(std::string address, Opener open, Clock* clock = Clock::Real())
      : address_(std::move(address)),
        open_(std::move(open)),
        clock_(clock),
        backoff_(kReopenBackoff) {}
  ~Subscription() {
    Cancel();
    if (reader_ != nullptr) reader_->Finish();
  }

  Event Next() {
    Event event;
    if (waiting_to_reconnect_) {
      // Wait out the backoff delay, waking early on Cancel().
      absl::MutexLock lock(&mutex_);
      clock_->AwaitWithTimeout(&mutex_, absl::Condition(&cancelled_), backoff_.Next());
      waiting_to_reconnect_ = false;
    }
    if (reader_ == nullptr) {
      grpc::ClientContext* context;
      {
        absl::MutexLock lock(&mutex_);
        if (cancelled_) return event;  // kCancelled
        // No deadline: a stream lasts as long as the engine. The first open does not wait for
        // the engine, so a missing one is reported at once; later ones do (see the top).
        context_ = std::make_unique<grpc::ClientContext>();
        context_->set_wait_for_ready(disconnected_before_);
        context = context_.get();
      }
      // Outside the lock: an open that waits for the engine blocks here until it is back, and
      // Cancel() must still be able to reach the context and end the wait.
      reader_ = open_(context);
      if (connected_before_) ++reconnects_;
    }
    if (reader_->Read(&message_)) {
      backoff_.Reset();
      event.kind = Event::kMessage;
      event.new_instance = connected_before_ && message_.instance_id() != last_instance_id_;
      if (event.new_instance || !connected_before_) last_instance_id_ = message_.instance_id();
      connected_before_ = true;
      event.message = &message_;
      return event;
    }
    const grpc::Status status = reader_->Finish();
    reader_.reset();
    {
      absl::MutexLock lock(&mutex_);
      context_.reset();
      if (cancelled_) return event;  // kCancelled
    }
    const grpc::StatusCode code = status.error_code();
    if (code == grpc::StatusCode::INVALID_ARGUMENT || code == grpc::StatusCode::PERMISSION_DENIED ||
        code == grpc::StatusCode::UNIMPLEMENTED) {
      event.kind = Event::kRejected;
      event.error = FromGrpc(status, address_);
      return event;
    }
    event.kind = Event::kDisconnected;
    event.error =
        status.ok()
            ? absl::UnavailableError(fmt::format("the engine at {} ended the stream", address_))
            : FromGrpc(status, address_);
    waiting_to_reconnect_ = true;
    disconnected_before_ = true;
    return event;
  }

  // Wakes Next() and makes it return kCancelled from now on.
  void Cancel() {
    absl::MutexLock lock(&mutex_);
    cancelled_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }

  // Reconnect attempts so far.
  uint64_t reconnects() const { return reconnects_; }

 private:
  const std::string address_;
  const Opener open_;
  Clock* const clock_;
  Backoff backoff_;
  std::string last_instance_id_;
  bool connected_before_ = false;
  bool waiting_to_reconnect_ = false;
  bool disconnected_before_ = false;  // from then on, opens wait for the engine
  uint64_t reconnects_ = 0;
  std::unique_ptr<grpc::ClientReader<Message>> reader_;
  Message message_;

  absl::Mutex mutex_;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  std::unique_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil

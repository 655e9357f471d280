// A server-streaming gRPC reactor fed from another thread through a bounded queue: the engine's
// fan-outs hand it items (ticks, events) without blocking, and it writes them one at a time.
// Subclasses say how an item becomes a message and how to unregister.
//
// Lifetime: created by a handler, deleted in OnDone() when gRPC is done with it. The fan-out holds
// a ForwardingListener (shared_ptr) that forwards items here until Detach(), which OnDone() calls
// so that no item can arrive after the reactor is gone.
//
// Locking: `mutex_` guards the queue and the write/finish state. StartWrite() and Finish() are
// never called with `mutex_` held (gRPC may run OnWriteDone on another thread at once); instead
// the thread that sets writing_ or finished_ under the lock owns that action. Finish() is only
// called with no write in flight, so OnDone() cannot run while a write is being started.
#pragma once

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/fanout.h"
#include "grpcpp/support/server_callback.h"

namespace vigil {

grpc::Status ToGrpcStatus(const absl::Status& status);

template <typename Item, typename Wire>
class QueuedStreamReactor : public grpc::ServerWriteReactor<Wire> {
 public:
  // What to do when a slow client's queue is full: drop the oldest item (and count it), or end
  // the stream with RESOURCE_EXHAUSTED (for streams where a gap would mislead, like audit events).
  enum class Overflow { kDropOldest, kEndStream };

  // Forwards a fan-out's calls to the reactor until Detach().
  class ForwardingListener final : public Listener<Item> {
   public:
    explicit ForwardingListener(QueuedStreamReactor* reactor) : reactor_(reactor) {}
    void OnMessage(const Item& item) override {
      absl::MutexLock lock(&mutex_);
      if (reactor_ != nullptr) reactor_->Enqueue(item);
    }
    void OnStop(const absl::Status& status) override {
      absl::MutexLock lock(&mutex_);
      if (reactor_ != nullptr) reactor_->Stop(status);
    }
    // Waits for a call in progress; none follows.
    void Detach() {
      absl::MutexLock lock(&mutex_);
      reactor_ = nullptr;
    }

   private:
    absl::Mutex mutex_;
    QueuedStreamReactor* reactor_ ABSL_GUARDED_BY(mutex_);
  };

  QueuedStreamReactor(size_t queue_depth, Overflow overflow)
      : overflow_(overflow), queue_(queue_depth) {}

  // Queues an item unless it is not newer than the last one queued (a stream that starts with a
  // snapshot or backlog and then goes live may be handed the same item twice).
  void Enqueue(const Item& item) {
    {
      absl::MutexLock lock(&mutex_);
      const uint64_t order = OrderOf(item);
      if (order == 0 || order <= last_order_ || end_status_) return;
      last_order_ = order;
      if (!queue_.Push(item) && overflow_ == Overflow::kEndStream) {
        end_status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "this client fell too far behind and items were lost: "
                                   "reconnect (asking for recent items) to catch up");
      }
    }
    Advance();
  }

  // Ends the stream with `status` once the write in flight (if any) is done.
  void Stop(const absl::Status& status) {
    {
      absl::MutexLock lock(&mutex_);
      if (!end_status_) end_status_ = ToGrpcStatus(status);
    }
    Advance();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      if (!ok && !end_status_) {
        end_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    Advance();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mutex_);
      if (!end_status_) end_status_ = grpc::Status::CANCELLED;
    }
    Advance();
  }

  void OnDone() override {
    if (listener_ != nullptr) {  // null when the request was refused before subscribing
      Unregister(listener_.get());
      listener_->Detach();
    }
    delete this;
  }

 protected:
  // A number that increases along the stream (seq, event id); 0 means "skip".
  virtual uint64_t OrderOf(const Item& item) const = 0;
  // Builds the message for `item`; `dropped` is how many items this stream has lost so far.
  virtual void Encode(const Item& item, uint64_t dropped, Wire* wire) = 0;
  // Removes the listener from whatever fan-out it was added to.
  virtual void Unregister(const Listener<Item>* listener) = 0;

  // The listener to register; created on first use.
  std::shared_ptr<ForwardingListener> listener() {
    if (listener_ == nullptr) listener_ = std::make_shared<ForwardingListener>(this);
    return listener_;
  }

 private:
  // Starts the next write, or finishes the stream, if nothing is in flight.
  void Advance() {
    std::optional<Item> next;
    uint64_t dropped = 0;
    grpc::Status finish_status;
    {
      absl::MutexLock lock(&mutex_);
      if (writing_ || finished_) return;
      if (end_status_) {
        finished_ = true;
        finish_status = *end_status_;
      } else {
        if (queue_.empty()) return;
        next = queue_.Pop();
        writing_ = true;
        dropped = queue_.dropped();
      }
    }
    if (!next) {
      this->Finish(finish_status);
      return;
    }
    // Owned by this thread until OnWriteDone: gRPC reads it during the write.
    Encode(*next, dropped, &wire_);
    this->StartWrite(&wire_);
  }

  std::shared_ptr<ForwardingListener> listener_;
  Wire wire_;  // owned by whoever set writing_
  const Overflow overflow_;

  absl::Mutex mutex_;
  BoundedQueue<Item> queue_ ABSL_GUARDED_BY(mutex_);
  uint64_t last_order_ ABSL_GUARDED_BY(mutex_) = 0;
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
  std::optional<grpc::Status> end_status_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace vigil

// Implements named threads with pthread_setname_np.
#include "common/thread.h"

#include <pthread.h>

namespace vigil {

std::thread StartNamedThread(const char* name, std::function<void()> body) {
  return std::thread([name, body = std::move(body)] {
    pthread_setname_np(pthread_self(), name);
    body();
  });
}

}  // namespace vigil

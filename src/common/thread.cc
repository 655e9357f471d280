// Implements named threads with pthread_setname_np.
#include "common/thread.h"

#include <pthread.h>

#include <algorithm>

namespace vigil {

std::thread StartNamedThread(std::string name, std::function<void()> body) {
  name.resize(std::min<size_t>(name.size(), 15));
  return std::thread([name = std::move(name), body = std::move(body)] {
    pthread_setname_np(pthread_self(), name.c_str());
    body();
  });
}

}  // namespace vigil

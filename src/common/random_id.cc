// Implements RandomInstanceId with std::random_device (getrandom on Linux).
#include "common/random_id.h"

#include <random>

#include "fmt/format.h"

namespace vigil {

std::string RandomInstanceId() {
  std::random_device entropy;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", entropy());
  return id;
}

}  // namespace vigil

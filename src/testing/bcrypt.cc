// Implements the tests' bcrypt hashes with libxcrypt.
#include "testing/bcrypt.h"

#include <crypt.h>

#include "common/check.h"

namespace vigil::testing {

std::string BcryptForTest(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  VIGIL_CHECK(crypt_gensalt_rn("$2y$", 4, nullptr, 0, salt, sizeof(salt)) != nullptr);
  crypt_data data{};
  const char* hash = crypt_r(password.c_str(), salt, &data);
  VIGIL_CHECK(hash != nullptr && hash[0] != '*');
  return hash;
}

}  // namespace vigil::testing

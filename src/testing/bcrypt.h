// A bcrypt hash for tests, at the lowest cost so that it is made in milliseconds (the web config's
// basic_auth_users). Thread-safe.
#pragma once

#include <string>

namespace vigil::testing {

// "$2y$04$..." of `password`, with a fresh salt.
std::string BcryptForTest(const std::string& password);

}  // namespace vigil::testing

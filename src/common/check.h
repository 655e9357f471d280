// Invariant checks: a broken invariant crashes loudly (Envoy's rule), expected failures do not
// come here. Abseil 20220623 on Debian 12 has no absl/log, hence this small macro.
// Thread-safe: writes one line to stderr and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#define VIGIL_CHECK(condition)                                                                 \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (false)

// A mutation fuzzer for Vigil's parsers, run as ordinary tests: each target takes real inputs
// (seeds) and feeds its parser mutations of them — bytes flipped, replaced, inserted and
// deleted, cuts, splices of two seeds — and random bytes over the format's alphabet. The seed is
// fixed, so a failure repeats; what must hold for every input is the target's to assert (and
// ASan's and UBSan's in `make fuzz`, which runs every target long). VIGIL_FUZZ_ITERATIONS sets
// the number of inputs of every target; without it each runs its short default (`make test`).
// Not thread-safe: one Mutator per target.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace vigil::testing {

// VIGIL_FUZZ_ITERATIONS when set to a positive number, else `short_pass`.
uint64_t FuzzIterations(uint64_t short_pass);

class Mutator {
 public:
  // `alphabet`: the characters the format is made of, most of what mutations insert, so that
  // they reach deep into the parser (a quarter of the inserted bytes are any byte).
  Mutator(uint64_t seed, std::string alphabet) : rng_(seed), alphabet_(std::move(alphabet)) {}

  size_t Below(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }
  char Byte();
  // 1 to 4 edits of `text`; a splice takes a piece of one of `seeds`.
  std::string Mutate(std::string text, const std::vector<std::string>& seeds);
  // Up to `max_size` bytes of the alphabet (and any byte).
  std::string Random(size_t max_size = 200);

 private:
  std::mt19937_64 rng_;
  const std::string alphabet_;
};

struct FuzzRun {
  uint64_t inputs = 0;
  uint64_t accepted = 0;  // inputs the target said it parsed
  double seconds = 0;
};

// Feeds `target` FuzzIterations(short_pass) inputs — mutated seeds, and one in eight random —
// and prints "fuzz NAME: N inputs (A parsed) in S s" for the record. `target` returns whether
// the input parsed; it asserts what must hold for any input.
FuzzRun Fuzz(std::string_view name, const std::vector<std::string>& seeds, std::string alphabet,
             uint64_t short_pass, const std::function<bool(const std::string&)>& target,
             uint64_t seed = 20261202);

}  // namespace vigil::testing

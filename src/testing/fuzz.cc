// Implements the mutation fuzzer.
#include "testing/fuzz.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace vigil::testing {

uint64_t FuzzIterations(uint64_t short_pass) {
  const char* text = std::getenv("VIGIL_FUZZ_ITERATIONS");
  const uint64_t asked = text != nullptr ? std::strtoull(text, nullptr, 10) : 0;
  return asked > 0 ? asked : short_pass;
}

char Mutator::Byte() {
  return Below(4) == 0 || alphabet_.empty() ? static_cast<char>(Below(256))
                                            : alphabet_[Below(alphabet_.size())];
}

std::string Mutator::Mutate(std::string text, const std::vector<std::string>& seeds) {
  const size_t edits = 1 + Below(4);
  for (size_t e = 0; e < edits; ++e) {
    switch (Below(6)) {
      case 0:  // flip a bit
        if (!text.empty()) text[Below(text.size())] ^= static_cast<char>(1 << Below(8));
        break;
      case 1:  // replace a byte
        if (!text.empty()) text[Below(text.size())] = Byte();
        break;
      case 2:  // insert bytes
        text.insert(Below(text.size() + 1), std::string(1 + Below(3), Byte()));
        break;
      case 3:  // delete a run
        if (!text.empty()) text.erase(Below(text.size()), 1 + Below(8));
        break;
      case 4:  // cut
        text.resize(Below(text.size() + 1));
        break;
      default: {  // splice with another seed
        if (seeds.empty()) break;
        const std::string& other = seeds[Below(seeds.size())];
        text = text.substr(0, Below(text.size() + 1)) + other.substr(Below(other.size() + 1));
      }
    }
  }
  return text;
}

std::string Mutator::Random(size_t max_size) {
  std::string text(Below(max_size), '\0');
  for (char& c : text) c = Byte();
  return text;
}

FuzzRun Fuzz(std::string_view name, const std::vector<std::string>& seeds, std::string alphabet,
             uint64_t short_pass, const std::function<bool(const std::string&)>& target,
             uint64_t seed) {
  Mutator mutator(seed, std::move(alphabet));
  FuzzRun run{.inputs = FuzzIterations(short_pass)};
  const auto started = std::chrono::steady_clock::now();
  for (const std::string& input : seeds) run.accepted += target(input);  // the seeds themselves
  for (uint64_t i = 0; i < run.inputs; ++i) {
    const std::string input = i % 8 == 7 || seeds.empty()
                                  ? mutator.Random()
                                  : mutator.Mutate(seeds[mutator.Below(seeds.size())], seeds);
    run.accepted += target(input);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("fuzz %.*s: %llu inputs (%llu parsed) in %.1f s\n", static_cast<int>(name.size()),
              name.data(), static_cast<unsigned long long>(run.inputs),
              static_cast<unsigned long long>(run.accepted), run.seconds);
  return run;
}

}  // namespace vigil::testing

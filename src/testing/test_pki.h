// A certificate authority for tests, made with OpenSSL at run time (nothing checked in expires):
// it issues server and client certificates with the names and validity a test asks for, and
// writes each as PEM files in a directory. Not thread-safe; one per test.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace vigil::testing {

class TestPki {
 public:
  struct Issued {
    std::string cert;  // PEM file paths
    std::string key;
  };
  struct Request {
    std::string common_name;
    std::vector<std::string> dns_names;           // subjectAltName DNS entries
    std::vector<std::string> uris;                // subjectAltName URI entries (SPIFFE ids)
    bool ip_localhost = false;                    // subjectAltName IP 127.0.0.1
    absl::Duration valid_from = absl::Hours(-1);  // relative to now
    absl::Duration valid_for = absl::Hours(24);
  };

  // A new CA named `name`, its certificate written to DIR/NAME-ca.pem (ca_file()).
  TestPki(std::string dir, std::string name);
  ~TestPki();

  const std::string& ca_file() const { return ca_file_; }
  // Issues a certificate signed by this CA, written to DIR/FILE_STEM.pem and DIR/FILE_STEM-key.pem
  // (replaced in place when they exist, as a rotation would).
  Issued Issue(const std::string& file_stem, const Request& request);

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::string dir_;
  std::string ca_file_;
};

}  // namespace vigil::testing

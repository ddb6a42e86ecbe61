#pragma once
// Certificates for TLS tests, made in memory in milliseconds (EC P-256 keys; sim/tls/tls.h does the OpenSSL work,
// the same code `sim-apiserver --generate-tls` uses): a CA, a serving certificate for 127.0.0.1 and
// localhost (IP and DNS subjectAltNames), and client certificates signed by the CA. Everything is PEM text;
// nothing touches the file system.
#include <string>
#include <string_view>
#include <vector>

#include "sim/tls/tls.h"

namespace hami::testing {

using sim::CertifiedKey;  // cert_pem, key_pem

// A new self-signed CA.
inline CertifiedKey MakeTestCa(std::string_view common_name = "hami-test-ca") {
  return sim::GenerateCertificateAuthority(common_name).value();
}

// A serving certificate signed by `ca` for 127.0.0.1 and localhost.
inline CertifiedKey MakeServerCert(const CertifiedKey& ca) {
  return sim::IssueServerCertificate(ca, "hami-test-server", {"127.0.0.1", "localhost"}).value();
}

// A client certificate signed by `ca`: CN `user`, one O per group.
inline CertifiedKey MakeClientCert(const CertifiedKey& ca, std::string_view user,
                                   const std::vector<std::string>& groups = {}) {
  return sim::IssueClientCertificate(ca, user, groups).value();
}

// One CA with a server and a client certificate ("test-user"), made once per test process.
struct TestPki {
  CertifiedKey ca;
  CertifiedKey server;
  CertifiedKey client;
};
inline const TestPki& SharedTestPki() {
  static const TestPki pki = [] {
    TestPki p;
    p.ca = MakeTestCa();
    p.server = MakeServerCert(p.ca);
    p.client = MakeClientCert(p.ca, "test-user", {"system:masters"});
    return p;
  }();
  return pki;
}

}  // namespace hami::testing

#pragma once
// TLS for the in-memory API server: throwaway certificates made in memory (EC P-256 keys, for
// `sim-apiserver --generate-tls` and the tests) and the server's TLS context built from PEM text (no files).
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace hami::sim {

// One certificate and its private key, both PEM (the key as PKCS#8 "PRIVATE KEY").
struct CertifiedKey {
  std::string cert_pem;
  std::string key_pem;
};

inline constexpr std::chrono::hours kDefaultCertValidity{24 * 365};

// A self-signed CA certificate (basicConstraints CA:TRUE, keyCertSign), valid from an hour ago (clock skew)
// for `validity`.
Result<CertifiedKey> GenerateCertificateAuthority(std::string_view common_name,
                                                  std::chrono::hours validity = kDefaultCertValidity);
// A serving certificate signed by `ca` (extendedKeyUsage serverAuth) for `hosts`: IP literals become IP
// subjectAltNames, anything else a DNS name. At least one host is required.
Result<CertifiedKey> IssueServerCertificate(const CertifiedKey& ca, std::string_view common_name,
                                            const std::vector<std::string>& hosts,
                                            std::chrono::hours validity = kDefaultCertValidity);
// A client certificate signed by `ca` (extendedKeyUsage clientAuth) as kube-apiserver reads them: the CN is
// the user name, each of `groups` one O.
Result<CertifiedKey> IssueClientCertificate(const CertifiedKey& ca, std::string_view user,
                                            const std::vector<std::string>& groups = {},
                                            std::chrono::hours validity = kDefaultCertValidity);

// What `sim-apiserver --generate-tls` makes: a CA, a serving certificate for 127.0.0.1, ::1 and localhost
// (plus `extra_hosts`), and a client certificate for `client_user` in group system:masters.
struct LoopbackTls {
  CertifiedKey ca;
  CertifiedKey server;
  CertifiedKey client;
};
Result<LoopbackTls> GenerateLoopbackTls(std::string_view client_user = "admin",
                                        const std::vector<std::string>& extra_hosts = {});

// A TLS 1.2+ server context serving `cert_chain_pem` (the leaf first) with `key_pem`. With `client_ca_pem`
// (one or more CA certificates) it requests a client certificate, advertises those CAs, and lets the
// handshake finish whatever the client sends: the HTTP server's PeerCertificate (k8s/http_server.h) says
// afterwards whether it verified, so that a bad certificate is answered 401 like kube-apiserver does, not
// with a handshake failure.
Result<std::unique_ptr<boost::asio::ssl::context>> MakeServerTlsContext(std::string_view cert_chain_pem,
                                                                        std::string_view key_pem,
                                                                        std::string_view client_ca_pem);

// PEM certificates in `pem` (how many, or an error naming `what` when there are none or one is malformed).
Result<std::size_t> CountCertificates(std::string_view pem, std::string_view what);

}  // namespace hami::sim

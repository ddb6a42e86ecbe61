#include "sim/tls/tls.h"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <functional>

namespace hami::sim {
namespace asio = boost::asio;
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(ASN1_INTEGER* p) const { ASN1_INTEGER_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
template <class T>
using Owned = std::unique_ptr<T, Free>;

// The most recent OpenSSL error, for messages ("error:...:bad decrypt"), and clears the queue.
std::string OpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  return buf;
}

Error Fail(std::string_view what) { return Error{fmt::format("{}: {}", what, OpenSslError())}; }

Owned<BIO> MemoryBio(std::string_view text) {
  return Owned<BIO>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

Result<std::string> ToPem(const std::function<int(BIO*)>& write, std::string_view what) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) return Fail(what);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return Ok(std::string(data, static_cast<std::size_t>(n)));
}

Result<Owned<EVP_PKEY>> NewKey() {
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return Fail("generating an EC P-256 key");
  return key;
}

Result<Owned<X509>> ReadCertificate(std::string_view pem, std::string_view what) {
  auto bio = MemoryBio(pem);
  Owned<X509> cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) return Fail(fmt::format("{}: not a PEM certificate", what));
  return cert;
}

Result<Owned<EVP_PKEY>> ReadKey(std::string_view pem, std::string_view what) {
  auto bio = MemoryBio(pem);
  Owned<EVP_PKEY> key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) return Fail(fmt::format("{}: not a PEM private key", what));
  return key;
}

Result<void> AddName(X509_NAME* name, const char* field, std::string_view value) {
  if (X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(value.data()),
                                 static_cast<int>(value.size()), -1, 0) != 1) {
    return Fail(fmt::format("certificate name {}={}", field, value));
  }
  return {};
}

Result<void> AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Owned<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Fail(fmt::format("certificate extension {} = {}", OBJ_nid2sn(nid), value));
  }
  return {};
}

struct Spec {
  std::string_view common_name;
  std::vector<std::string> organizations;
  std::chrono::hours validity{0};
  bool ca = false;
  std::string extended_key_usage;  // "serverAuth", "clientAuth"
  std::string subject_alt_names;   // "IP:127.0.0.1,DNS:localhost"
};

// Makes a certificate for a new key; signed by `issuer` (certificate and key), or self-signed when null.
Result<CertifiedKey> Make(const Spec& spec, X509* issuer_cert, EVP_PKEY* issuer_key) {
  auto key = NewKey();
  if (!key) return key.error();
  Owned<X509> cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) return Fail("new certificate");
  // A random positive 63-bit serial.
  Owned<BIGNUM> serial(BN_new());
  if (!serial || BN_rand(serial.get(), 63, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ANY) != 1) {
    return Fail("certificate serial number");
  }
  Owned<ASN1_INTEGER> asn1_serial(BN_to_ASN1_INTEGER(serial.get(), nullptr));
  if (!asn1_serial || X509_set_serialNumber(cert.get(), asn1_serial.get()) != 1) {
    return Fail("certificate serial number");
  }
  const long validity = static_cast<long>(std::chrono::seconds(spec.validity).count());
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), validity)) {
    return Fail("certificate validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  for (const auto& o : spec.organizations) {
    if (auto r = AddName(name, "O", o); !r) return r.error();
  }
  if (auto r = AddName(name, "CN", spec.common_name); !r) return r.error();
  if (X509_set_issuer_name(cert.get(), issuer_cert ? X509_get_subject_name(issuer_cert) : name) != 1 ||
      X509_set_pubkey(cert.get(), key->get()) != 1) {
    return Fail("certificate issuer and key");
  }
  X509* issuer = issuer_cert ? issuer_cert : cert.get();
  std::vector<std::pair<int, std::string>> extensions;
  if (spec.ca) {
    extensions = {{NID_basic_constraints, "critical,CA:TRUE"},
                  {NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature"},
                  {NID_subject_key_identifier, "hash"}};
  } else {
    extensions = {{NID_basic_constraints, "critical,CA:FALSE"},
                  {NID_key_usage, "critical,digitalSignature"},
                  {NID_ext_key_usage, spec.extended_key_usage},
                  {NID_authority_key_identifier, "keyid:always"}};
    if (!spec.subject_alt_names.empty())
      extensions.emplace_back(NID_subject_alt_name, spec.subject_alt_names);
  }
  for (const auto& [nid, value] : extensions) {
    if (auto r = AddExtension(cert.get(), issuer, nid, value); !r) return r.error();
  }
  if (X509_sign(cert.get(), issuer_key ? issuer_key : key->get(), EVP_sha256()) == 0) {
    return Fail(fmt::format("signing the certificate for '{}'", spec.common_name));
  }
  auto cert_pem = ToPem([&](BIO* b) { return PEM_write_bio_X509(b, cert.get()); }, "writing a certificate");
  if (!cert_pem) return cert_pem.error();
  auto key_pem = ToPem(
      [&](BIO* b) { return PEM_write_bio_PrivateKey(b, key->get(), nullptr, nullptr, 0, nullptr, nullptr); },
      "writing a private key");
  if (!key_pem) return key_pem.error();
  return CertifiedKey{std::move(*cert_pem), std::move(*key_pem)};
}

Result<CertifiedKey> Issue(const CertifiedKey& ca, const Spec& spec) {
  auto ca_cert = ReadCertificate(ca.cert_pem, "CA certificate");
  if (!ca_cert) return ca_cert.error();
  auto ca_key = ReadKey(ca.key_pem, "CA key");
  if (!ca_key) return ca_key.error();
  return Make(spec, ca_cert->get(), ca_key->get());
}

}  // namespace

Result<CertifiedKey> GenerateCertificateAuthority(std::string_view common_name, std::chrono::hours validity) {
  Spec spec;
  spec.common_name = common_name;
  spec.validity = validity;
  spec.ca = true;
  return Make(spec, nullptr, nullptr);
}

Result<CertifiedKey> IssueServerCertificate(const CertifiedKey& ca, std::string_view common_name,
                                            const std::vector<std::string>& hosts,
                                            std::chrono::hours validity) {
  if (hosts.empty()) return Error{fmt::format("server certificate '{}': no hosts to name", common_name)};
  Spec spec;
  spec.common_name = common_name;
  spec.validity = validity;
  spec.extended_key_usage = "serverAuth";
  for (const auto& host : hosts) {
    if (host.empty() || host.find_first_of(", \t\r\n") != std::string::npos) {
      return Error{
          fmt::format("server certificate '{}': '{}' is not a host name or address", common_name, host)};
    }
    boost::system::error_code ec;
    (void)asio::ip::make_address(host, ec);
    if (!spec.subject_alt_names.empty()) spec.subject_alt_names += ',';
    spec.subject_alt_names += (ec ? "DNS:" : "IP:") + host;
  }
  return Issue(ca, spec);
}

Result<CertifiedKey> IssueClientCertificate(const CertifiedKey& ca, std::string_view user,
                                            const std::vector<std::string>& groups,
                                            std::chrono::hours validity) {
  if (user.empty()) return Error{"client certificate: the user name (CN) is empty"};
  Spec spec;
  spec.common_name = user;
  spec.organizations = groups;
  spec.validity = validity;
  spec.extended_key_usage = "clientAuth";
  return Issue(ca, spec);
}

Result<LoopbackTls> GenerateLoopbackTls(std::string_view client_user,
                                        const std::vector<std::string>& extra_hosts) {
  LoopbackTls out;
  auto ca = GenerateCertificateAuthority("hami-sim-ca");
  if (!ca) return ca.error();
  out.ca = std::move(*ca);
  std::vector<std::string> hosts{"127.0.0.1", "::1", "localhost"};
  for (const auto& h : extra_hosts) {
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  auto server = IssueServerCertificate(out.ca, "hami-sim-apiserver", hosts);
  if (!server) return server.error();
  out.server = std::move(*server);
  auto client = IssueClientCertificate(out.ca, client_user, {"system:masters"});
  if (!client) return client.error();
  out.client = std::move(*client);
  return out;
}

Result<std::size_t> CountCertificates(std::string_view pem, std::string_view what) {
  ERR_clear_error();  // only this parse's errors count below
  auto bio = MemoryBio(pem);
  if (!bio) return Fail(what);
  std::size_t n = 0;
  for (;;) {
    Owned<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!cert) break;
    ++n;
  }
  // Reading stops with "no start line" at the end of the text; anything else is a malformed certificate.
  const unsigned long last = ERR_peek_last_error();
  const bool clean_end = last == 0 || ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  if (!clean_end) return Fail(fmt::format("{}: malformed certificate #{}", what, n + 1));
  ERR_clear_error();
  if (n == 0) return Error{fmt::format("{}: no PEM certificate found", what)};
  return n;
}

Result<std::unique_ptr<asio::ssl::context>> MakeServerTlsContext(std::string_view cert_chain_pem,
                                                                 std::string_view key_pem,
                                                                 std::string_view client_ca_pem) {
  if (auto n = CountCertificates(cert_chain_pem, "TLS certificate"); !n) return n.error();
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
  SSL_CTX* native = ctx->native_handle();
  // No resumption: every connection does a full handshake, so every connection presents its certificate.
  SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(native, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(native, 0);
  // The client certificate is read once, after the first handshake: no TLS 1.2 renegotiation to swap it.
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION);
  static constexpr unsigned char kSessionContext[] = "hami-sim-apiserver";
  SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
  boost::system::error_code ec;
  ctx->use_certificate_chain(asio::buffer(cert_chain_pem.data(), cert_chain_pem.size()), ec);
  if (ec) return Error{fmt::format("TLS certificate: {}", ec.message())};
  ctx->use_private_key(asio::buffer(key_pem.data(), key_pem.size()), asio::ssl::context::pem, ec);
  if (ec && ec.category() == asio::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) {
    return Error{"TLS private key: it does not belong to the certificate (key values mismatch)"};
  }
  if (ec) return Error{fmt::format("TLS private key: {}", ec.message())};
  if (SSL_CTX_check_private_key(native) != 1) {
    return Fail("TLS private key: it does not belong to the certificate");
  }
  if (client_ca_pem.empty()) {
    ctx->set_verify_mode(asio::ssl::verify_none);
    return ctx;
  }
  if (auto n = CountCertificates(client_ca_pem, "client CA"); !n) return n.error();
  ctx->add_certificate_authority(asio::buffer(client_ca_pem.data(), client_ca_pem.size()), ec);
  if (ec) return Error{fmt::format("client CA: {}", ec.message())};
  // Advertise the accepted CAs in the CertificateRequest (Go clients such as kubectl pick a certificate by
  // them).
  auto bio = MemoryBio(client_ca_pem);
  while (Owned<X509> ca{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
    if (SSL_CTX_add_client_CA(native, ca.get()) != 1) return Fail("client CA list");
  }
  ERR_clear_error();
  // Request (not require) a certificate; token clients present none. The callback accepts every chain so the
  // handshake completes; the outcome is read back with SSL_get_verify_result.
  ctx->set_verify_mode(asio::ssl::verify_peer);
  ctx->set_verify_callback([](bool, asio::ssl::verify_context&) { return true; }, ec);
  if (ec) return Error{fmt::format("client CA: {}", ec.message())};
  return ctx;
}

}  // namespace hami::sim

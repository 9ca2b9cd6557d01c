#include "transport/secure/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <climits>
#include <cstring>
#include <string>

#include "psrt/error.h"
#include "transport/wire.h"

namespace psrt::transport::secure {
namespace {

[[noreturn]] void crypto_failed(const char* what) {
  throw Error(ErrorCode::kInternal, std::string("OpenSSL ") + what + " failed");
}

unsigned char* u8(std::byte* p) {
  return reinterpret_cast<unsigned char*>(p);
}
const unsigned char* u8(const std::byte* p) {
  return reinterpret_cast<const unsigned char*>(p);
}

}  // namespace

Nonce random_nonce() {
  Nonce n;
  if (RAND_bytes(u8(n.data()), static_cast<int>(n.size())) != 1)
    throw Error(ErrorCode::kSystem, "RAND_bytes failed: no entropy for the secure handshake");
  return n;
}

Key derive_key(std::string_view secret, std::span<const std::byte> salt, std::string_view label) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) crypto_failed("EVP_KDF_fetch(HKDF)");
  EVP_KDF_CTX* kctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (kctx == nullptr) crypto_failed("EVP_KDF_CTX_new");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<std::byte*>(salt.data()),
                                        salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(label.data()),
                                        label.size()),
      OSSL_PARAM_construct_end(),
  };
  Key key;
  const int ok = EVP_KDF_derive(kctx, u8(key.data()), key.size(), params);
  EVP_KDF_CTX_free(kctx);
  if (ok != 1) crypto_failed("HKDF-SHA256");
  return key;
}

Mac mac(const Key& key, std::string_view label) {
  Mac m;
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(label.data()), label.size(), u8(m.data()),
            &len) ||
      len != m.size())
    crypto_failed("HMAC-SHA256");
  return m;
}

bool same_mac(std::span<const std::byte> a, const Mac& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), b.size()) == 0;
}

Aead::Aead(const Key& key, bool seal) : ctx_(EVP_CIPHER_CTX_new()), seal_(seal) {
  if (ctx_ == nullptr) crypto_failed("EVP_CIPHER_CTX_new");
  if (EVP_CipherInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, u8(key.data()), nullptr, seal ? 1 : 0) !=
      1) {
    EVP_CIPHER_CTX_free(ctx_);
    crypto_failed("AES-256-GCM init");
  }
}

Aead::~Aead() {
  EVP_CIPHER_CTX_free(ctx_);
}

void Aead::begin(Domain domain, std::uint64_t seq, std::uint32_t segment) {
  std::array<std::byte, 12> iv;
  wire::store<std::uint32_t>(iv.data(), static_cast<std::uint32_t>(domain) | segment << 8);
  wire::store<std::uint64_t>(iv.data() + 4, seq);
  if (EVP_CipherInit_ex(ctx_, nullptr, nullptr, nullptr, u8(iv.data()), seal_ ? 1 : 0) != 1)
    crypto_failed("AES-256-GCM nonce");
}

void Aead::aad(std::span<const std::byte> data) {
  int out = 0;
  if (EVP_CipherUpdate(ctx_, nullptr, &out, u8(data.data()), static_cast<int>(data.size())) != 1)
    crypto_failed("AES-256-GCM aad");
}

void Aead::crypt(const std::byte* in, std::byte* out, std::size_t size) {
  constexpr std::size_t kChunk = std::size_t{1} << 30;  // EVP takes int lengths
  while (size > 0) {
    const std::size_t n = size < kChunk ? size : kChunk;
    int wrote = 0;
    if (EVP_CipherUpdate(ctx_, u8(out), &wrote, u8(in), static_cast<int>(n)) != 1 ||
        static_cast<std::size_t>(wrote) != n)
      crypto_failed("AES-256-GCM update");
    in += n;
    out += n;
    size -= n;
  }
}

Tag Aead::seal_tag() {
  int out = 0;
  unsigned char none[16];
  if (EVP_CipherFinal_ex(ctx_, none, &out) != 1) crypto_failed("AES-256-GCM final");
  Tag tag;
  if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, static_cast<int>(tag.size()), tag.data()) !=
      1)
    crypto_failed("AES-256-GCM tag");
  return tag;
}

bool Aead::open_tag(const Tag& tag) {
  Tag copy = tag;
  if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, static_cast<int>(copy.size()), copy.data()) !=
      1)
    crypto_failed("AES-256-GCM set tag");
  int out = 0;
  unsigned char none[16];
  return EVP_CipherFinal_ex(ctx_, none, &out) == 1;
}

}  // namespace psrt::transport::secure

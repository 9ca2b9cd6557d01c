// The secure mode's primitives: HKDF-SHA256 key derivation, HMAC-SHA256 key confirmation and
// AES-256-GCM sealing with a 96-bit nonce made of a domain, a segment and a sequence number
// (OpenSSL EVP).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

using EVP_CIPHER_CTX = struct evp_cipher_ctx_st;

namespace psrt::transport::secure {

inline constexpr std::size_t kKeyBytes = 32;
inline constexpr std::size_t kTagBytes = 16;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;

using Key = std::array<std::byte, kKeyBytes>;
using Tag = std::array<std::byte, kTagBytes>;
using Nonce = std::array<std::byte, kNonceBytes>;
using Mac = std::array<std::byte, kMacBytes>;

Nonce random_nonce();

// HKDF-SHA256 (RFC 5869): `secret` as input key material, `salt`, and `label` as info.
Key derive_key(std::string_view secret, std::span<const std::byte> salt, std::string_view label);

// HMAC-SHA256 of `label` under `key`.
Mac mac(const Key& key, std::string_view label);

// Constant-time comparison.
bool same_mac(std::span<const std::byte> a, const Mac& b);

// Which part of a message a nonce seals: the header and the payload of one message share its
// sequence number, so they differ in the domain; a payload's segments (segments.h) differ in
// their index. The nonce's first 4 bytes are domain | segment << 8.
enum class Domain : std::uint32_t { kHeader = 1, kPayload = 2 };

// AES-256-GCM under one key, for one direction (sealing or opening). A message is sealed or
// opened as begin(), any number of aad() then crypt() calls, then seal_tag()/open_tag().
// Not thread-safe; the key is never used with the same (domain, segment, seq) twice by the caller.
class Aead {
 public:
  Aead(const Key& key, bool seal);
  ~Aead();
  Aead(const Aead&) = delete;
  Aead& operator=(const Aead&) = delete;

  // `segment` < 2^24; 0 for a header.
  void begin(Domain domain, std::uint64_t seq, std::uint32_t segment = 0);
  void aad(std::span<const std::byte> data);
  // `out` may equal `in` (in-place).
  void crypt(const std::byte* in, std::byte* out, std::size_t size);
  Tag seal_tag();
  // False when the tag does not match: the message was altered or sealed under another key.
  bool open_tag(const Tag& tag);

 private:
  EVP_CIPHER_CTX* ctx_ = nullptr;
  const bool seal_;
};

}  // namespace psrt::transport::secure

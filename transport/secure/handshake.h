// The secure mode's handshake and message layout (transport/secure).
//
// Handshake: as soon as a connection exists, each end sends HELLO with a fresh random nonce.
// With both nonces, each end derives the connection's keys from the job secret (HKDF-SHA256,
// salt = the two nonces in ascending order) and sends CONFIRM, an HMAC that proves it holds the
// secret. An end that receives a CONFIRM it cannot verify closes the connection; the connection
// is handed upward (Receiver::on_connected, connect() returns) only after the peer's CONFIRM
// checks out. The two ends are told apart by the order of their nonces, so the handshake is the
// same on both sides; equal nonces (a reflected HELLO) are refused. (When only one end's CONFIRM
// fails, e.g. altered on the way, the other end may already have handed the connection upward;
// it then sees it closed at once, before any message of it was accepted.)
//
//   handshake message (header only, 40 bytes, little-endian)
//   0   4  magic 'PSSC' (0x43535350)
//   4   2  version (2: payloads in segments; 1 sealed a payload whole)
//   6   1  type: 1 HELLO, 2 CONFIRM
//   7   1  reserved, 0
//   8   32 nonce (HELLO) or HMAC-SHA256 (CONFIRM)
//
// After the handshake every message is sealed (AES-256-GCM, one key per direction):
//
//   sealed header
//   0   8     sequence number (per direction, from 0): in the nonce of every seal
//   8   16·k  the payload's k segment tags (k = segment_count(payload length), 0 without one)
//   ..  n     the caller's header, encrypted
//   ..  16    header tag (AAD: the bytes before the ciphertext and the payload length)
//
// The payload is encrypted to the same length (received straight into the caller's placement
// and decrypted there), as k segments (segments.h) sealed and opened in parallel, each with its
// own nonce and tag; the header's tag covers the segment tags. The sequence numbers make a
// replayed, reordered, dropped or other-connection message fail; the segment indices, a segment
// moved within its payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "transport/secure/crypto.h"
#include "transport/secure/segments.h"
#include "transport/transport.h"

namespace psrt::transport::secure {

inline constexpr std::uint32_t kMagic = 0x43535350;  // "PSSC" little-endian
inline constexpr std::uint16_t kVersion = 2;
inline constexpr std::size_t kHandshakeBytes = 40;

enum class HandshakeType : std::uint8_t { kHello = 1, kConfirm = 2 };

struct HandshakeMessage {
  HandshakeType type = HandshakeType::kHello;
  std::array<std::byte, 32> body{};
};

void encode_handshake(const HandshakeMessage& m, std::byte* out);
// Empty on success, else why the bytes are not a handshake message.
std::string decode_handshake(std::span<const std::byte> in, HandshakeMessage& out);

inline constexpr std::size_t kSeqBytes = 8;
// Largest header a caller may send in secure mode.
inline constexpr std::size_t kMaxPlainHeaderBytes =
    kMaxHeaderBytes - kSeqBytes - (kMaxSegments + 1) * kTagBytes;

struct SessionKeys {
  Key send;
  Key recv;
  Mac my_confirm;
  Mac peer_confirm;
};

// Throws psrt::Error(kAuthentication) when the nonces are equal.
SessionKeys derive_session(std::string_view secret, const Nonce& mine, const Nonce& theirs);

}  // namespace psrt::transport::secure

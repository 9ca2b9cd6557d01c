// Job membership proof: HMAC-SHA256 challenge-response over a per-job secret (OpenSSL).
// Both sides prove the secret over both nonces: the client first (AUTH), so that a client with a
// wrong secret gets the acceptor's clear refusal; then the acceptor (in WELCOME), so that a
// client never talks to an impostor. Both proofs also cover who the two ends are (the role and
// rank the client claimed in HELLO, the role and rank the client expects of the acceptor), so
// that nobody on the path can change a HELLO's role or rank, and a worker's proof to a server
// covers the membership credential the scheduler gave it for its rank (ps/session/protocol.h).
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "ps/session/protocol.h"

namespace psrt::ps {
inline namespace session {

using Nonce = std::array<std::byte, kNonceBytes>;
using Digest = std::array<std::byte, kDigestBytes>;

// One end of a connection as the handshake names it.
struct Identity {
  Role role = Role::kWorker;
  std::uint32_t rank = kAnyRank;
};

Nonce random_nonce();
// A fresh random membership credential (the scheduler's, one per worker registration).
Credential random_credential();

// Proof that the sender of `label` holds `secret` (and `credential`, when not empty), bound to
// both ends' identities and both nonces.
Digest prove(std::string_view secret, std::string_view label, const Identity& client,
             const Identity& acceptor, const Nonce& first, const Nonce& second,
             std::span<const std::byte> credential = {});
// Constant-time comparison.
bool same_digest(std::span<const std::byte> a, const Digest& b);

// A fresh random secret: 64 hex characters.
std::string generate_secret();
// The secret from a file (first line, surrounding whitespace trimmed). Throws psrt::Error
// naming the file when it cannot be read, is not a regular file, can be accessed by group or
// others (any of mode 077; the message says `chmod 600`) or holds fewer than kMinSecretChars.
std::string read_secret_file(const std::string& path);

// A job secret has at least this many characters: one observed handshake (two nonces and a
// proof) lets anyone test guesses offline, so a short secret is as good as none.
inline constexpr std::size_t kMinSecretChars = 32;
// Throws psrt::Error (kInvalidArgument) naming `source` (e.g. "PSRT_SECRET") when `secret` is
// shorter than kMinSecretChars.
void check_secret_length(std::string_view secret, std::string_view source);

}  // namespace session
}  // namespace psrt::ps

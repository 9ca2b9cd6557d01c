// Job membership proof: HMAC-SHA256 challenge-response over a per-job secret (OpenSSL).
// Both sides prove the secret over both nonces: the client first (AUTH), so that a client with a
// wrong secret gets the acceptor's clear refusal; then the acceptor (in WELCOME), so that a
// client never talks to an impostor.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "ps/protocol.h"

namespace psrt::ps {

using Nonce = std::array<std::byte, kNonceBytes>;
using Digest = std::array<std::byte, kDigestBytes>;

Nonce random_nonce();

// Proof that the sender of `label` holds `secret`, bound to both nonces.
Digest prove(std::string_view secret, std::string_view label, const Nonce& first,
             const Nonce& second);
// Constant-time comparison.
bool same_digest(std::span<const std::byte> a, const Digest& b);

// A fresh random secret: 64 hex characters.
std::string generate_secret();
// The secret from a file (first line, surrounding whitespace trimmed). Throws psrt::Error
// naming the file when it cannot be read, is not a regular file, can be accessed by group or
// others (any of mode 077; the message says `chmod 600`) or holds fewer than 16 characters.
std::string read_secret_file(const std::string& path);

}  // namespace psrt::ps

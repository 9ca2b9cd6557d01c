#include "transport/secure/handshake.h"

#include <cstring>

#include "psrt/error.h"
#include "transport/wire.h"

namespace psrt::transport::secure {

void encode_handshake(const HandshakeMessage& m, std::byte* out) {
  wire::store<std::uint32_t>(out, kMagic);
  wire::store<std::uint16_t>(out + 4, kVersion);
  out[6] = static_cast<std::byte>(m.type);
  out[7] = std::byte{0};
  std::memcpy(out + 8, m.body.data(), m.body.size());
}

std::string decode_handshake(std::span<const std::byte> in, HandshakeMessage& out) {
  if (in.size() != kHandshakeBytes)
    return "a " + std::to_string(in.size()) + "-byte message where a " +
           std::to_string(kHandshakeBytes) + "-byte handshake message belongs";
  if (wire::load<std::uint32_t>(in.data()) != kMagic) return "a message without the secure magic";
  if (auto v = wire::load<std::uint16_t>(in.data() + 4); v != kVersion)
    return "secure handshake version " + std::to_string(v) + " (this build speaks " +
           std::to_string(kVersion) + ": run one psrt version on every host of the job)";
  const auto type = static_cast<std::uint8_t>(in[6]);
  if ((type != 1 && type != 2) || in[7] != std::byte{0})
    return "an unknown handshake message type " + std::to_string(type);
  out.type = static_cast<HandshakeType>(type);
  std::memcpy(out.body.data(), in.data() + 8, out.body.size());
  return {};
}

SessionKeys derive_session(std::string_view secret, const Nonce& mine, const Nonce& theirs) {
  const int order = std::memcmp(mine.data(), theirs.data(), mine.size());
  if (order == 0)
    throw Error(ErrorCode::kAuthentication,
                "the peer's handshake nonce equals ours (a reflected HELLO)");
  const bool low = order < 0;
  const Nonce& lo = low ? mine : theirs;
  const Nonce& hi = low ? theirs : mine;
  std::array<std::byte, 2 * kNonceBytes> salt;
  std::memcpy(salt.data(), lo.data(), kNonceBytes);
  std::memcpy(salt.data() + kNonceBytes, hi.data(), kNonceBytes);
  const Key lo_to_hi = derive_key(secret, salt, "psrt secure v1 key lo->hi");
  const Key hi_to_lo = derive_key(secret, salt, "psrt secure v1 key hi->lo");
  const Key confirm = derive_key(secret, salt, "psrt secure v1 confirm");
  const Mac confirm_lo = mac(confirm, "psrt secure v1 confirm from lo");
  const Mac confirm_hi = mac(confirm, "psrt secure v1 confirm from hi");
  SessionKeys k;
  k.send = low ? lo_to_hi : hi_to_lo;
  k.recv = low ? hi_to_lo : lo_to_hi;
  k.my_confirm = low ? confirm_lo : confirm_hi;
  k.peer_confirm = low ? confirm_hi : confirm_lo;
  return k;
}

}  // namespace psrt::transport::secure

#include "transport/ucx/hello_auth.h"

#include <algorithm>
#include <array>
#include <string>

#include "transport/secure/crypto.h"
#include "transport/wire.h"

namespace psrt::transport::ucx {

HelloMac hello_mac(std::string_view secret, HelloSide side, const HelloNonce& listener_nonce,
                   const HelloNonce& connector_nonce, std::span<const std::byte> hello) {
  std::array<std::byte, 2 * kHelloNonceBytes> salt{};
  std::copy(listener_nonce.begin(), listener_nonce.end(), salt.begin());
  std::copy(connector_nonce.begin(), connector_nonce.end(), salt.begin() + kHelloNonceBytes);
  const secure::Key key = secure::derive_key(secret, salt, "psrt ucx hello v3");
  std::string text(1, static_cast<char>(side));
  text.append(reinterpret_cast<const char*>(hello.data()), hello.size());
  if (hello.size() >= kHelloMacOffset + kHelloMacBytes)
    std::fill_n(text.begin() + 1 + kHelloMacOffset, kHelloMacBytes, '\0');
  const secure::Mac m = secure::mac(key, text);
  HelloMac out;
  std::copy(m.begin(), m.end(), out.begin());
  return out;
}

void sign_hello(std::string_view secret, HelloSide side, const HelloNonce& listener_nonce,
                const HelloNonce& connector_nonce, std::span<std::byte> hello) {
  wire::store<std::uint16_t>(hello.data() + 6,
                             wire::load<std::uint16_t>(hello.data() + 6) | kHelloAuthenticated);
  const HelloMac m = hello_mac(secret, side, listener_nonce, connector_nonce, hello);
  std::copy(m.begin(), m.end(), hello.begin() + kHelloMacOffset);
}

bool hello_proves_secret(std::string_view secret, HelloSide side, const HelloNonce& listener_nonce,
                         const HelloNonce& connector_nonce, std::span<const std::byte> hello) {
  if (hello.size() < kHelloFixedBytes) return false;
  if ((wire::load<std::uint16_t>(hello.data() + 6) & kHelloAuthenticated) == 0) return false;
  const HelloMac m = hello_mac(secret, side, listener_nonce, connector_nonce, hello);
  secure::Mac expected;
  std::copy(m.begin(), m.end(), expected.begin());
  return secure::same_mac(hello.subspan(kHelloMacOffset, kHelloMacBytes), expected);
}

}  // namespace psrt::transport::ucx

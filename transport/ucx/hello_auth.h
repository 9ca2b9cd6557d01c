// The proof in a UCX bootstrap HELLO (hello.h): HMAC-SHA256 under a key derived from the job
// secret and both nonces of the exchange (HKDF-SHA256, transport/secure/crypto.h), over the HELLO
// with its mac zeroed, and over which end sent it. Checked before an endpoint is created from the
// HELLO's worker address.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "transport/ucx/hello.h"

namespace psrt::transport::ucx {

// Which end sent a HELLO: a HELLO is never valid the other way (reflected).
enum class HelloSide : char { kConnector = 'C', kListener = 'L' };

// The mac of `hello` (its encoding; the mac field's bytes are ignored) in the exchange of
// `listener_nonce` (the CHALLENGE's) and `connector_nonce` (the connector's HELLO's).
HelloMac hello_mac(std::string_view secret, HelloSide side, const HelloNonce& listener_nonce,
                   const HelloNonce& connector_nonce, std::span<const std::byte> hello);

// Writes hello_mac() into the mac field of the encoded `hello` and sets its authenticated flag.
void sign_hello(std::string_view secret, HelloSide side, const HelloNonce& listener_nonce,
                const HelloNonce& connector_nonce, std::span<std::byte> hello);

// Whether the encoded `hello` carries the authenticated flag and the right mac (constant time).
bool hello_proves_secret(std::string_view secret, HelloSide side, const HelloNonce& listener_nonce,
                         const HelloNonce& connector_nonce, std::span<const std::byte> hello);

}  // namespace psrt::transport::ucx

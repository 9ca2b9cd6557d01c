#include "ps/session/auth.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace psrt::ps {
inline namespace session {

Nonce random_nonce() {
  Nonce n;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1)
    throw Error(ErrorCode::kSystem, "RAND_bytes failed: no entropy for the auth nonce");
  return n;
}

Credential random_credential() {
  Credential c;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(c.data()), static_cast<int>(c.size())) != 1)
    throw Error(ErrorCode::kSystem, "RAND_bytes failed: no entropy for a membership credential");
  return c;
}

Digest prove(std::string_view secret, std::string_view label, const Identity& client,
             const Identity& acceptor, const Nonce& first, const Nonce& second,
             std::span<const std::byte> credential) {
  // Fixed-size fields after the label, so that no two inputs share an encoding.
  std::string msg = "psrt-auth-v2:";
  msg += label;
  auto u32 = [&msg](std::uint32_t v) {
    for (int i = 0; i < 4; ++i)
      msg += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  u32(static_cast<std::uint32_t>(client.role));
  u32(client.rank);
  u32(static_cast<std::uint32_t>(acceptor.role));
  u32(acceptor.rank);
  msg.append(reinterpret_cast<const char*>(first.data()), first.size());
  msg.append(reinterpret_cast<const char*>(second.data()), second.size());
  u32(static_cast<std::uint32_t>(credential.size()));
  msg.append(reinterpret_cast<const char*>(credential.data()), credential.size());
  Digest d;
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
            reinterpret_cast<unsigned char*>(d.data()), &len) ||
      len != d.size())
    throw Error(ErrorCode::kInternal, "HMAC-SHA256 failed");
  return d;
}

bool same_digest(std::span<const std::byte> a, const Digest& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), b.size()) == 0;
}

std::string generate_secret() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1)
    throw Error(ErrorCode::kSystem, "RAND_bytes failed: cannot generate a job secret");
  std::string hex;
  for (unsigned char c : raw)
    hex += fmt::format("{:02x}", c);
  return hex;
}

std::string read_secret_file(const std::string& path) {
  // The mode is checked on the descriptor that is read, so the file cannot be swapped between.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot read the secret file '{}': {}", path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("the secret file '{}' is not a regular file", path));
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("the secret file '{}' is accessible to group or others (mode {:04o}); "
                            "make it private to its owner: chmod 600 '{}'",
                            path, st.st_mode & 07777, path));
  }
  std::string line;  // the first line
  char chunk[4096];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(chunk, static_cast<std::size_t>(n));
    if (auto nl = line.find('\n'); nl != std::string::npos) {
      line.resize(nl);
      break;
    }
  }
  ::close(fd);
  auto first = line.find_first_not_of(" \t\r");
  auto last = line.find_last_not_of(" \t\r");
  line = first == std::string::npos ? "" : line.substr(first, last - first + 1);
  check_secret_length(line, fmt::format("the secret file '{}'", path));
  return line;
}

void check_secret_length(std::string_view secret, std::string_view source) {
  if (secret.size() >= kMinSecretChars) return;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("the job secret from {} has {} characters; use at least {}, e.g. "
                          "`openssl rand -hex 32` (psrun makes a random one when none is given): "
                          "a short secret can be guessed offline from one observed handshake",
                          source, secret.size(), kMinSecretChars));
}

}  // namespace session
}  // namespace psrt::ps

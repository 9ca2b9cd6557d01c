// Job membership proof: HMAC-SHA256 over the label, both ends' roles and ranks, both nonces and
// the membership credential; secrets and secret files.
#include "ps/session/auth.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace psrt::ps {
namespace {

namespace fs = std::filesystem;

Nonce nonce_of(std::uint8_t fill) {
  Nonce n;
  for (std::size_t i = 0; i < n.size(); ++i)
    n[i] = std::byte(static_cast<std::uint8_t>(fill + i));
  return n;
}

constexpr std::string_view kSecret = "0123456789abcdef0123456789abcdef";
const Identity kWorker3{Role::kWorker, 3};
const Identity kServer1{Role::kServer, 1};

Digest proof(std::string_view secret, std::string_view label, const Nonce& a, const Nonce& b) {
  return prove(secret, label, kWorker3, kServer1, a, b);
}

TEST(Auth, ProofIsHmacSha256OverTheLabelIdentitiesNoncesAndCredential) {
  const Nonce a = nonce_of(1);
  const Nonce b = nonce_of(100);
  Credential cred;
  for (std::size_t i = 0; i < cred.size(); ++i)
    cred[i] = std::byte(static_cast<std::uint8_t>(7 * i));
  // The proof's exact input is part of the wire protocol: peers of one version must agree.
  std::string msg = "psrt-auth-v2:client";
  for (std::uint32_t v : {2u, 3u, 1u, 1u})  // worker 3 to server 1, u32 little-endian each
    msg.append({static_cast<char>(v), 0, 0, 0});
  msg.append(reinterpret_cast<const char*>(a.data()), a.size());
  msg.append(reinterpret_cast<const char*>(b.data()), b.size());
  msg.append({16, 0, 0, 0});
  msg.append(reinterpret_cast<const char*>(cred.data()), cred.size());
  Digest expected{};
  unsigned int len = 0;
  ASSERT_NE(HMAC(EVP_sha256(), kSecret.data(), static_cast<int>(kSecret.size()),
                 reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                 reinterpret_cast<unsigned char*>(expected.data()), &len),
            nullptr);
  ASSERT_EQ(len, kDigestBytes);
  EXPECT_EQ(prove(kSecret, "client", kWorker3, kServer1, a, b, cred), expected);
}

TEST(Auth, ProofIsDeterministicAndBoundToEveryInput) {
  const Nonce a = nonce_of(1);
  const Nonce b = nonce_of(100);
  const Digest base = proof(kSecret, "client", a, b);
  EXPECT_EQ(proof(kSecret, "client", a, b), base);
  EXPECT_NE(proof(kSecret, "acceptor", a, b), base) << "label";
  EXPECT_NE(proof("0123456789abcdef0123456789abcdeF", "client", a, b), base) << "secret";
  EXPECT_NE(proof(kSecret, "client", nonce_of(2), b), base) << "first nonce";
  EXPECT_NE(proof(kSecret, "client", a, nonce_of(101)), base) << "second nonce";
  EXPECT_NE(proof(kSecret, "client", b, a), base) << "nonce order";
}

// A HELLO's role and rank cannot be changed on the way: the proof of worker 3 is not the proof
// of worker 0, of a server 3, or of a worker 3 talking to another server; and a proof with a
// membership credential is not one without it or with another.
TEST(Auth, ProofIsBoundToRoleRankAndCredential) {
  const Nonce a = nonce_of(1);
  const Nonce b = nonce_of(100);
  const Digest base = prove(kSecret, "client", kWorker3, kServer1, a, b);
  EXPECT_NE(prove(kSecret, "client", {Role::kWorker, 0}, kServer1, a, b), base) << "client rank";
  EXPECT_NE(prove(kSecret, "client", {Role::kServer, 3}, kServer1, a, b), base) << "client role";
  EXPECT_NE(prove(kSecret, "client", kWorker3, {Role::kServer, 0}, a, b), base) << "server rank";
  EXPECT_NE(prove(kSecret, "client", kWorker3, {Role::kScheduler, 1}, a, b), base)
      << "acceptor role";
  Credential c1{}, c2{};
  c2[15] = std::byte{1};
  const Digest with = prove(kSecret, "client", kWorker3, kServer1, a, b, c1);
  EXPECT_NE(with, base) << "a credential, even all zero, changes the proof";
  EXPECT_NE(prove(kSecret, "client", kWorker3, kServer1, a, b, c2), with) << "credential";
  EXPECT_NE(random_credential(), random_credential());
}

TEST(Auth, RandomNoncesDiffer) {
  EXPECT_NE(random_nonce(), random_nonce());
}

TEST(Auth, SameDigestComparesSizeAndEveryByte) {
  const Digest d = proof(kSecret, "x", nonce_of(0), nonce_of(50));
  EXPECT_TRUE(same_digest(d, d));
  for (std::size_t i : {std::size_t{0}, std::size_t{17}, kDigestBytes - 1}) {
    Digest other = d;
    other[i] ^= std::byte{1};
    EXPECT_FALSE(same_digest(other, d)) << "byte " << i;
  }
  std::span<const std::byte> all(d);
  EXPECT_FALSE(same_digest(all.first(kDigestBytes - 1), d));
  EXPECT_FALSE(same_digest({}, d));
  std::vector<std::byte> longer(d.begin(), d.end());
  longer.push_back(std::byte{0});
  EXPECT_FALSE(same_digest(longer, d));
}

TEST(Auth, GeneratedSecretsAre64HexCharactersAndDiffer) {
  const std::string a = generate_secret();
  const std::string b = generate_secret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

class SecretFile : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("psrt_unit_auth_" + std::to_string(::getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& text) {
    std::string path = (dir_ / "secret").string();
    std::ofstream(path, std::ios::binary) << text;
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);  // refused otherwise
    return path;
  }

  // Expects read_secret_file(path) to throw kInvalidArgument naming the path and `needle`.
  static void expect_refused(const std::string& path, const std::string& needle) {
    try {
      (void)read_secret_file(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + path + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  }

  fs::path dir_;
};

TEST_F(SecretFile, TrimsWhitespaceAndReadsTheFirstLineOnly) {
  EXPECT_EQ(read_secret_file(write(" \t0123456789abcdef0123456789abcdefXYZ \r\nsecond line\n")),
            "0123456789abcdef0123456789abcdefXYZ");
  EXPECT_EQ(read_secret_file(write("0123456789abcdef0123456789abcdef")),
            "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(read_secret_file(write("abcd efgh ijkl mnop qrst uvwx yz01\n")),
            "abcd efgh ijkl mnop qrst uvwx yz01")
      << "inner spaces are part of the secret";
}

TEST_F(SecretFile, RefusesShortSecrets) {
  // 31 characters: one short of kMinSecretChars (16 was the old minimum).
  expect_refused(write("0123456789abcdef0123456789abcde\n"), "has 31 characters; use at least 32");
  expect_refused(write("0123456789abcdef\n"), "has 16 characters; use at least 32");
  expect_refused(write("   0123456789abcdef0123456789abcde   \n0123456789abcdef0123456789abcdef"),
                 "has 31 characters");
  expect_refused(write(""), "has 0 characters");
  expect_refused(write(" \t \r\n"), "has 0 characters");
}

TEST_F(SecretFile, RefusesMissingFiles) {
  expect_refused((dir_ / "missing").string(), "cannot read the secret file");
}

}  // namespace
}  // namespace psrt::ps

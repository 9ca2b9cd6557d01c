// Job membership proof: HMAC-SHA256 over the label and both nonces, secrets and secret files.
#include "ps/auth.h"

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

TEST(Auth, ProofIsHmacSha256OverTheLabelAndBothNonces) {
  const Nonce a = nonce_of(1);
  const Nonce b = nonce_of(100);
  // The proof's exact input is part of the wire protocol: peers of one version must agree.
  std::string msg = "psrt-auth-v1:client";
  msg.append(reinterpret_cast<const char*>(a.data()), a.size());
  msg.append(reinterpret_cast<const char*>(b.data()), b.size());
  Digest expected{};
  unsigned int len = 0;
  ASSERT_NE(HMAC(EVP_sha256(), kSecret.data(), static_cast<int>(kSecret.size()),
                 reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                 reinterpret_cast<unsigned char*>(expected.data()), &len),
            nullptr);
  ASSERT_EQ(len, kDigestBytes);
  EXPECT_EQ(prove(kSecret, "client", a, b), expected);
}

TEST(Auth, ProofIsDeterministicAndBoundToEveryInput) {
  const Nonce a = nonce_of(1);
  const Nonce b = nonce_of(100);
  const Digest base = prove(kSecret, "client", a, b);
  EXPECT_EQ(prove(kSecret, "client", a, b), base);
  EXPECT_NE(prove(kSecret, "acceptor", a, b), base) << "label";
  EXPECT_NE(prove("0123456789abcdef0123456789abcdeF", "client", a, b), base) << "secret";
  EXPECT_NE(prove(kSecret, "client", nonce_of(2), b), base) << "first nonce";
  EXPECT_NE(prove(kSecret, "client", a, nonce_of(101)), base) << "second nonce";
  EXPECT_NE(prove(kSecret, "client", b, a), base) << "nonce order";
}

TEST(Auth, RandomNoncesDiffer) {
  EXPECT_NE(random_nonce(), random_nonce());
}

TEST(Auth, SameDigestComparesSizeAndEveryByte) {
  const Digest d = prove(kSecret, "x", nonce_of(0), nonce_of(50));
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
    const std::string path = (dir_ / "secret").string();
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
  EXPECT_EQ(read_secret_file(write(" \t0123456789abcdefXYZ \r\nsecond line\n")),
            "0123456789abcdefXYZ");
  EXPECT_EQ(read_secret_file(write("0123456789abcdef")), "0123456789abcdef");
  EXPECT_EQ(read_secret_file(write("abcd efgh ijkl mnop\n")), "abcd efgh ijkl mnop")
      << "inner spaces are part of the secret";
}

TEST_F(SecretFile, RefusesShortSecrets) {
  expect_refused(write("0123456789abcde\n"), "has 15 characters; use at least 16");
  expect_refused(write("   0123456789abcde   \n0123456789abcdef0123"), "has 15 characters");
  expect_refused(write(""), "has 0 characters");
  expect_refused(write(" \t \r\n"), "has 0 characters");
}

TEST_F(SecretFile, RefusesMissingFiles) {
  expect_refused((dir_ / "missing").string(), "cannot read the secret file");
}

}  // namespace
}  // namespace psrt::ps

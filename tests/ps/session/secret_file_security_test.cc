// A secret file that group or others can read (or write) is refused with the file's name, its
// mode and the fix; a private one is read.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ps/session/auth.h"

namespace psrt::ps {
namespace {

namespace fs = std::filesystem;

class SecretFileSecurity : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("psrt_sec_secret_" + std::to_string(::getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(mode_t mode) {
    std::string path = (dir_ / "secret").string();
    fs::remove(path);
    std::ofstream(path) << "0123456789abcdef0123456789abcdef\n";
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }

  fs::path dir_;
};

TEST_F(SecretFileSecurity, AFileGroupOrOthersCanAccessIsRefusedWithTheFix) {
  for (mode_t mode : {0644, 0640, 0604, 0660, 0620, 0602, 0610, 0601, 0666}) {
    const std::string path = write(mode);
    SCOPED_TRACE(testing::Message() << "mode 0" << std::oct << mode);
    try {
      (void)read_secret_file(path);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      char octal[8];
      std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
      EXPECT_NE(what.find("the secret file '" + path + "' is accessible to group or others (mode " +
                          octal + ")"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("chmod 600 '" + path + "'"), std::string::npos) << what;
    }
  }
}

TEST_F(SecretFileSecurity, APrivateFileIsRead) {
  for (mode_t mode : {0600, 0400}) {
    SCOPED_TRACE(testing::Message() << "mode 0" << std::oct << mode);
    EXPECT_EQ(read_secret_file(write(mode)), "0123456789abcdef0123456789abcdef");
  }
}

TEST_F(SecretFileSecurity, ADirectoryOrFifoIsRefusedWithoutBlocking) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, dir_.string()}) {
    try {
      (void)read_secret_file(path);
      ADD_FAILURE() << path << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the secret file '" + path + "' is not a regular file"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace psrt::ps

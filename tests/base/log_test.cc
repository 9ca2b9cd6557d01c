// base/log.h's rate limit: a burst goes through, the rest is counted and reported once.
#include "base/log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace {

using namespace std::chrono_literals;

TEST(RateLimit, LetsABurstThroughThenCountsWhatItSuppressed) {
  psrt::log::RateLimit limit(3, 200ms);
  std::uint64_t suppressed = 99;
  int allowed = 0;
  for (int i = 0; i < 1000; ++i)
    allowed += limit.allow(suppressed);
  EXPECT_EQ(allowed, 3);
  EXPECT_EQ(suppressed, 0u);
  std::this_thread::sleep_for(250ms);
  ASSERT_TRUE(limit.allow(suppressed));
  EXPECT_EQ(suppressed, 997u);  // reported with the first line of the next window
  ASSERT_TRUE(limit.allow(suppressed));
  EXPECT_EQ(suppressed, 0u);
}

}  // namespace

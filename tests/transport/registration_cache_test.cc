#include "transport/registration_cache.h"

#include <gtest/gtest.h>

namespace psrt::transport {
namespace {

TEST(RegistrationCache, FindsTheRegionContainingARange) {
  RegistrationCache<int> cache;
  char a[1000], b[1000];
  cache.insert(a, 100, 1);
  cache.insert(b + 500, 200, 2);
  EXPECT_EQ(cache.find(a, 100), 1);
  EXPECT_EQ(cache.find(a + 99, 1), 1);
  EXPECT_FALSE(cache.find(a + 99, 2));
  EXPECT_EQ(cache.find(b + 600, 100), 2);
  EXPECT_FALSE(cache.find(b + 499, 10));
  EXPECT_FALSE(cache.find(b, 1));
}

TEST(RegistrationCache, DetectsOverlapsAndErases) {
  RegistrationCache<int> cache;
  char a[1000];
  cache.insert(a + 100, 100, 7);
  EXPECT_TRUE(cache.overlaps(a + 150, 500));
  EXPECT_TRUE(cache.overlaps(a, 101));
  EXPECT_FALSE(cache.overlaps(a, 100));
  EXPECT_FALSE(cache.overlaps(a + 200, 10));
  EXPECT_EQ(cache.erase(a + 100), 7);
  EXPECT_FALSE(cache.erase(a + 100));
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace psrt::transport

#include "pstrain/data/dataset.h"

#include <gtest/gtest.h>

#include "psrt/error.h"
#include "test_files.h"

namespace psrt::pstrain {
namespace {

TEST(Dataset, Names) {
  EXPECT_EQ(dataset_names(),
            (std::vector<std::string>{"fashion-mnist", "mnist", "cifar10", "synthetic"}));
}

TEST(Dataset, UnknownNameListsTheKnownOnes) {
  EXPECT_PSRT_ERROR(load_dataset("imagenet", ""), ErrorCode::kInvalidArgument,
                    "unknown data set 'imagenet'; known data sets: fashion-mnist, mnist, "
                    "cifar10, synthetic");
}

}  // namespace
}  // namespace psrt::pstrain

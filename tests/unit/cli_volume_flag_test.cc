// --volume NAME:/PATH[:ro] of run and create.
#include <gtest/gtest.h>

#include "cli/volume_commands.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

TEST(VolumeFlag, SplitsNamePathAndMode) {
  EXPECT_EQ(*ParseVolumeFlag("cache:/cache"), (json{{"name", "cache"}, {"path", "/cache"}, {"read_only", false}}));
  EXPECT_EQ(*ParseVolumeFlag("data:/srv/data:ro"), (json{{"name", "data"}, {"path", "/srv/data"}, {"read_only", true}}));
  EXPECT_EQ(*ParseVolumeFlag("data:/srv/data:rw"), (json{{"name", "data"}, {"path", "/srv/data"}, {"read_only", false}}));
  // The daemon judges the path; a relative one is passed on for it to refuse.
  EXPECT_EQ((*ParseVolumeFlag("c:rel"))["path"], "rel");
}

TEST(VolumeFlag, RefusesWhatIsNotNamePath) {
  for (const char* bad : {"cache", ":/cache", "cache:", "cache:/c:rx", "cache:/c:", "cache::ro"}) {
    auto parsed = ParseVolumeFlag(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().detail_code, "usage") << bad;
  }
}

}  // namespace
}  // namespace bulkhead::cli

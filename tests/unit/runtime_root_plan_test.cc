// The root plan shared by the gvisor and microvm tiers: which layers go under each host
// directory, for the host image, an image built on it, and an image with nothing there.
#include "runtime/root_plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/temp_state_dir.h"

namespace bulkhead::runtime {
namespace {

namespace fs = std::filesystem;

class RootPlanTest : public ::testing::Test {
 protected:
  // An image root with `file` under it (none when empty).
  std::string Tree(const std::string& name, const std::string& file) {
    const std::string tree = dir_.path() + "/" + name;
    fs::create_directories(tree + "/usr");
    if (!file.empty()) {
      fs::create_directories(fs::path(tree + file).parent_path());
      std::ofstream(tree + file) << "x";
    }
    return tree;
  }

  testing::TempStateDir dir_{"bulkhead-root-plan"};
};

TEST_F(RootPlanTest, AnImageWithNothingUnderAHostDirBindsTheHostDirItself) {
  RootfsLayers rootfs{.image = Tree("image", ""), .host_binds = {"/usr"}, .upper = "/u", .work = "/w"};
  std::vector<MountStep> steps;
  EXPECT_EQ(PlanRootOverlay(rootfs, "/t", steps), "/t/root");
  EXPECT_EQ(PlanHostDir(rootfs, "/usr", 0, "/t", steps), "/usr");
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[1].source, rootfs.image);
  EXPECT_TRUE(steps[1].idmapped);
  EXPECT_EQ(steps[3].options, "lowerdir=/t/lower,upperdir=/u,workdir=/w");
}

TEST_F(RootPlanTest, TheHostImagesAdditionsGoOverTheHostDir) {
  RootfsLayers rootfs{.image = Tree("host", "/usr/bin/sudo"), .host_binds = {"/usr"}, .upper = "/u", .work = "/w"};
  std::vector<MountStep> steps;
  PlanRootOverlay(rootfs, "/t", steps);
  EXPECT_EQ(PlanHostDir(rootfs, "/usr", 0, "/t", steps), "/t/host0");
  EXPECT_EQ(steps.back().kind, MountStep::kOverlay);
  EXPECT_EQ(steps.back().options, "lowerdir=/t/lower/usr:/usr");
}

TEST_F(RootPlanTest, AnImageBuiltOnHostShowsItsOwnFilesOverTheHostImagesOverTheHosts) {
  RootfsLayers rootfs{.image = Tree("built", "/usr/local/tool"), .host_binds = {"/usr"},
                      .host_image = Tree("host", "/usr/bin/sudo"), .upper = "/u", .work = "/w"};
  std::vector<MountStep> steps;
  PlanRootOverlay(rootfs, "/t", steps);
  // The host image is attached idmapped like the image, read where the boot happens.
  bool attached = false;
  for (const MountStep& step : steps)
    attached |= step.kind == MountStep::kClone && step.source == rootfs.host_image && step.idmapped &&
                step.target == "/t/hostimage" && !step.writable;
  EXPECT_TRUE(attached);
  EXPECT_EQ(PlanHostDir(rootfs, "/usr", 0, "/t", steps), "/t/host0");
  EXPECT_EQ(steps.back().options, "lowerdir=/t/lower/usr:/t/hostimage/usr:/usr");

  // Nothing of its own there: the host image's additions alone.
  rootfs.image = Tree("empty", "");
  EXPECT_EQ(PlanHostDir(rootfs, "/usr", 1, "/t", steps), "/t/host1");
  EXPECT_EQ(steps.back().options, "lowerdir=/t/hostimage/usr:/usr");
}

}  // namespace
}  // namespace bulkhead::runtime

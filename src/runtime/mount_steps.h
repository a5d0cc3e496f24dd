// The steps a tier's setup child takes to assemble a sandbox's filesystems on a tmpfs of its
// own mount namespace (the gvisor tier's launcher, the microvm tier's device helpers). Each
// file that includes it is built without ASan and TSan instrumentation (child_syscalls.h).
#pragma once
#include <string>

#include "runtime/child_syscalls.h"

namespace bulkhead::runtime {

// One step, in order.
struct MountStep {
  enum Kind {
    kDir,      // mkdir target
    kClone,    // a detached clone of source (read-only unless writable; idmapped from the
               // stored ids if idmapped) attached at target
    kOverlay,  // overlayfs at target with `options`
  } kind = kDir;
  std::string source, target, options;
  bool writable = false;
  bool idmapped = false;
  bool recursive = false;
};

// Takes `step`; a failure ends the child (child::Fail). `plan->stored_ids_fd` is the user
// namespace whose mapping an idmapped clone takes.
template <typename Plan>
void RunMountStep(Plan* plan, const MountStep& step) {
  switch (step.kind) {
    case MountStep::kDir:
      STEP(::mkdir(step.target.c_str(), 0711) == 0 || errno == EEXIST, "mkdir on the launch tmpfs");
      return;
    case MountStep::kClone: {
      const char* failed = nullptr;
      int fd = child::CloneTree(step.source.c_str(), step.recursive, step.writable,
                                step.idmapped ? plan->stored_ids_fd : -1, &failed);
      STEP(fd >= 0, failed);
      STEP(::syscall(SYS_move_mount, fd, "", AT_FDCWD, step.target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) == 0,
           "move_mount");
      child::Close(fd);
      return;
    }
    case MountStep::kOverlay:
      STEP(::mount("overlay", step.target.c_str(), "overlay", MS_NOSUID | MS_NODEV | (step.writable ? 0 : MS_RDONLY),
                   step.options.c_str()) == 0,
           "mount overlay");
      return;
  }
}

}  // namespace bulkhead::runtime

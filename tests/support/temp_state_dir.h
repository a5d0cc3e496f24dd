// A directory under /tmp for one test, such as a daemon's state dir: on destruction the
// storage image mounted at <dir>/storage (storage::Storage::Open mounts one) is unmounted
// and the directory removed with all under it. Storage or a manager opened on it must be
// closed first: declare it before them, and it outlives them.
#pragma once
#include <string>

namespace bulkhead::testing {

class TempStateDir {
 public:
  explicit TempStateDir(const std::string& prefix = "bulkhead-test");
  ~TempStateDir();
  TempStateDir(const TempStateDir&) = delete;
  TempStateDir& operator=(const TempStateDir&) = delete;

  const std::string& path() const { return path_; }
  // A no-op when nothing is mounted there. Unmounting frees the image's loop device (it was
  // attached with autoclear).
  void UnmountStorage() const;

 private:
  std::string path_;
};

}  // namespace bulkhead::testing

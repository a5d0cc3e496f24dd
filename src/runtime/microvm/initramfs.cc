#include "runtime/microvm/initramfs.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>

#include "common/read_file.h"

namespace bulkhead::runtime::microvm {
namespace {

struct ArchiveFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

Error ArchiveError(archive* a, const std::string& what) {
  const char* why = archive_error_string(a);
  return MakeError(ErrorCode::kInternal, "initramfs: " + what + ": " + (why ? why : "failed"));
}

Status Add(archive* a, const std::string& name, mode_t mode, const std::string& data) {
  std::unique_ptr<archive_entry, EntryFree> entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_mode(entry.get(), mode);
  archive_entry_set_uid(entry.get(), 0);
  archive_entry_set_gid(entry.get(), 0);
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(S_ISREG(mode) ? data.size() : 0));
  if (archive_write_header(a, entry.get()) != ARCHIVE_OK) return ArchiveError(a, "add " + name);
  if (S_ISREG(mode) && !data.empty() &&
      archive_write_data(a, data.data(), data.size()) != static_cast<la_ssize_t>(data.size()))
    return ArchiveError(a, "write " + name);
  return {};
}

// The signature a module signed at build time carries at its end: the PKCS#7 blob, then a
// 12-byte struct module_signature whose last 4 bytes are the blob's length (big-endian), then
// this marker.
constexpr char kSignatureMarker[] = "~Module signature appended~\n";
constexpr size_t kSignatureInfo = 12;

}  // namespace

std::string WithoutModuleSignature(std::string module) {
  const size_t marker = sizeof kSignatureMarker - 1;
  if (module.size() < marker + kSignatureInfo || !module.ends_with(kSignatureMarker)) return module;
  const auto* length = reinterpret_cast<const unsigned char*>(module.data() + module.size() - marker - 4);
  const size_t signature = (size_t{length[0]} << 24) | (size_t{length[1]} << 16) | (size_t{length[2]} << 8) | length[3];
  if (signature > module.size() - marker - kSignatureInfo) return module;  // not a signature after all
  module.resize(module.size() - marker - kSignatureInfo - signature);
  return module;
}

namespace {

Result<std::string> Read(const std::string& path) {
  auto data = ReadSmallFile(path, 256 << 20);
  if (!data) return MakeError(ErrorCode::kUnavailable, "initramfs: cannot read " + path);
  return std::move(*data);
}

}  // namespace

Status WriteInitramfs(const std::string& path, const InitramfsFiles& files) {
  auto init = Read(files.init_binary);
  if (!init) return init.error();
  const std::string temp = path + ".new";
  std::unique_ptr<archive, ArchiveFree> a(archive_write_new());
  if (!a || archive_write_set_format_cpio_newc(a.get()) != ARCHIVE_OK ||
      archive_write_add_filter_none(a.get()) != ARCHIVE_OK)
    return MakeError(ErrorCode::kInternal, "initramfs: cannot set up the cpio writer");
  ::unlink(temp.c_str());
  if (archive_write_open_filename(a.get(), temp.c_str()) != ARCHIVE_OK) return ArchiveError(a.get(), "create " + temp);
  BH_TRY(Add(a.get(), "init", S_IFREG | 0755, *init));
  BH_TRY(Add(a.get(), "seccomp.bpf", S_IFREG | 0444, files.seccomp_filter));
  if (!files.modules.empty()) {
    BH_TRY(Add(a.get(), "modules", S_IFDIR | 0755, ""));
    std::string order;
    for (const std::string& module : files.modules) {
      const std::string name = std::filesystem::path(module).filename().string();
      auto data = Read(module);
      if (!data) return data.error();
      BH_TRY(Add(a.get(), "modules/" + name, S_IFREG | 0444, WithoutModuleSignature(std::move(*data))));
      order += name + "\n";
    }
    BH_TRY(Add(a.get(), "modules/order", S_IFREG | 0444, order));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) return ArchiveError(a.get(), "finish " + temp);
  if (::chmod(temp.c_str(), 0600) != 0) return SystemError("chmod " + temp, errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) return SystemError("rename " + temp, errno);
  return {};
}

}  // namespace bulkhead::runtime::microvm

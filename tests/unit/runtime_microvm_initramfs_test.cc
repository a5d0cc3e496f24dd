// The microvm guest's initramfs, read back as the kernel would unpack it (a newc cpio).
#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "runtime/microvm/initramfs.h"

namespace bulkhead::runtime::microvm {
namespace {

namespace fs = std::filesystem;

struct Entry {
  mode_t mode = 0;
  std::string data;
};

std::map<std::string, Entry> ReadBack(const std::string& path, std::string& format) {
  std::map<std::string, Entry> entries;
  archive* a = archive_read_new();
  archive_read_support_format_all(a);
  archive_read_support_filter_all(a);
  EXPECT_EQ(archive_read_open_filename(a, path.c_str(), 1 << 16), ARCHIVE_OK);
  archive_entry* entry = nullptr;
  while (archive_read_next_header(a, &entry) == ARCHIVE_OK) {
    Entry e;
    e.mode = archive_entry_mode(entry);
    EXPECT_EQ(archive_entry_uid(entry), 0);
    char buf[8192];
    for (la_ssize_t n; (n = archive_read_data(a, buf, sizeof buf)) > 0;) e.data.append(buf, n);
    entries[archive_entry_pathname(entry)] = e;
    format = archive_format_name(a);
  }
  archive_read_free(a);
  return entries;
}

class InitramfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/initramfs-test-XXXXXX";
    dir_ = ::mkdtemp(dir);
    for (const char* name : {"init", "virtio.ko", "vsock.ko"}) std::ofstream(dir_ + "/" + name) << "contents of " << name;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(InitramfsTest, HoldsInitTheFilterAndTheModulesInLoadOrder) {
  const std::string out = dir_ + "/initramfs.cpio";
  ASSERT_TRUE(WriteInitramfs(out, {dir_ + "/init", std::string("\x06\x00\x00\x00\x00\x00\xff\x7f", 8),
                                   {dir_ + "/vsock.ko", dir_ + "/virtio.ko"}}).ok());
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  std::string format;
  auto entries = ReadBack(out, format);
  EXPECT_NE(format.find("SVR4"), std::string::npos) << format;  // newc, what the kernel unpacks
  ASSERT_EQ(entries.count("init"), 1u);
  EXPECT_EQ(entries["init"].mode, S_IFREG | 0755u);
  EXPECT_EQ(entries["init"].data, "contents of init");
  EXPECT_EQ(entries["seccomp.bpf"].data.size(), 8u);
  EXPECT_EQ(entries["seccomp.bpf"].mode, S_IFREG | 0444u);
  EXPECT_EQ(entries["modules"].mode, S_IFDIR | 0755u);
  EXPECT_EQ(entries["modules/order"].data, "vsock.ko\nvirtio.ko\n");
  EXPECT_EQ(entries["modules/virtio.ko"].data, "contents of virtio.ko");
  EXPECT_FALSE(fs::exists(out + ".new"));
}

// A module as kbuild signs it: code, PKCS#7 blob, struct module_signature (length last,
// big-endian), marker.
std::string Signed(const std::string& code, const std::string& blob) {
  std::string info(12, '\0');
  info[8] = static_cast<char>(blob.size() >> 24);
  info[9] = static_cast<char>(blob.size() >> 16);
  info[10] = static_cast<char>(blob.size() >> 8);
  info[11] = static_cast<char>(blob.size());
  return code + blob + info + "~Module signature appended~\n";
}

TEST(ModuleSignatureTest, TheAppendedSignatureGoesAndAnythingElseStaysAsItIs) {
  const std::string code("\x7f" "ELF module code\0with nuls", 26);
  EXPECT_EQ(WithoutModuleSignature(Signed(code, std::string(700, 's'))), code);
  EXPECT_EQ(WithoutModuleSignature(Signed(code, "")), code);
  EXPECT_EQ(WithoutModuleSignature(code), code);  // unsigned
  // A length longer than what precedes it: not a signature, kept whole.
  std::string lying = Signed(code, "sig");
  lying[lying.size() - 29] = 100;
  EXPECT_EQ(WithoutModuleSignature(lying), lying);
  const std::string bare = "~Module signature appended~\n";  // no room for the struct
  EXPECT_EQ(WithoutModuleSignature(bare), bare);
}

TEST_F(InitramfsTest, ModulesGoInWithoutTheirSignatures) {
  std::ofstream(dir_ + "/signed.ko") << Signed("module code", std::string(500, 'x'));
  const std::string out = dir_ + "/initramfs.cpio";
  ASSERT_TRUE(WriteInitramfs(out, {dir_ + "/init", "bpf", {dir_ + "/signed.ko", dir_ + "/vsock.ko"}}).ok());
  std::string format;
  auto entries = ReadBack(out, format);
  EXPECT_EQ(entries["modules/signed.ko"].data, "module code");
  EXPECT_EQ(entries["modules/vsock.ko"].data, "contents of vsock.ko");
}

TEST_F(InitramfsTest, WithoutModulesThereIsNoModulesDirectory) {
  const std::string out = dir_ + "/initramfs.cpio";
  ASSERT_TRUE(WriteInitramfs(out, {dir_ + "/init", "bpf", {}}).ok());
  std::string format;
  auto entries = ReadBack(out, format);
  EXPECT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries.count("modules"), 0u);
}

TEST_F(InitramfsTest, AMissingFileIsNamedAndNothingIsLeftBehind) {
  const std::string out = dir_ + "/initramfs.cpio";
  auto written = WriteInitramfs(out, {dir_ + "/init", "bpf", {dir_ + "/missing.ko"}});
  ASSERT_FALSE(written.ok());
  EXPECT_NE(written.error().message.find("missing.ko"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace bulkhead::runtime::microvm

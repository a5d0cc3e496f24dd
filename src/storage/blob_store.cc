#include "storage/blob_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>

#include "common/digest.h"

#include "storage/fs_util.h"
#include "storage/image_ref.h"

namespace bulkhead::storage {
namespace {

std::string Hex(const std::string& digest) { return digest.substr(7); }  // after "sha256:"

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
  }
  return names;
}

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOSPC || errno == EDQUOT) return MakeError(ErrorCode::kDiskFull, "writing " + what + ": disk full");
      return SystemError("write " + what, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

bool SameFile(int fd, const std::string& path) {
  struct stat a, b;
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

Result<std::unique_ptr<BlobStore>> BlobStore::Open(const std::string& root) {
  BH_TRY(MakeDir(root, 0700));
  BH_TRY(MakeDir(root + "/sha256", 0700));
  BH_TRY(MakeDir(root + "/partial", 0700));
  return std::unique_ptr<BlobStore>(new BlobStore(root));
}

std::string BlobStore::PathOf(const std::string& digest) const { return root_ + "/sha256/" + Hex(digest); }
std::string BlobStore::PartialPath(const std::string& digest) const { return root_ + "/partial/" + Hex(digest); }

bool BlobStore::Has(const std::string& digest) const {
  struct stat st;
  return IsSha256Digest(digest) && ::stat(PathOf(digest).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> BlobStore::ReadSmall(const std::string& digest, size_t max_bytes) const {
  if (!IsSha256Digest(digest)) return MakeError(ErrorCode::kInvalid, "not a sha256 digest: " + digest);
  struct stat st;
  if (::stat(PathOf(digest).c_str(), &st) != 0) return MakeError(ErrorCode::kNotFound, "no blob " + digest, "blob_not_found");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return MakeError(ErrorCode::kTooLarge, "blob " + digest + " is too large");
  return ReadFile(PathOf(digest));
}

Status BlobStore::Put(const std::string& digest, std::string_view data) {
  auto writer = BeginWrite(digest, data.size());
  if (!writer.ok()) return writer.error();
  if ((*writer)->done()) return {};
  BH_TRY((*writer)->Restart());
  BH_TRY((*writer)->Append(data));
  return (*writer)->Commit();
}

Result<std::unique_ptr<BlobWriter>> BlobStore::BeginWrite(const std::string& digest, uint64_t size) {
  if (!IsSha256Digest(digest)) return MakeError(ErrorCode::kInvalid, "not a sha256 digest: " + digest, "invalid_image");
  std::unique_ptr<BlobWriter> writer(new BlobWriter(digest, size, PartialPath(digest), PathOf(digest)));
  // Lock the partial file; if another writer renamed or removed it while we waited, the lock
  // is on a file no longer at that path: open again.
  for (;;) {
    if (Has(digest)) {
      writer->done_ = true;
      return writer;
    }
    UniqueFd fd(::open(writer->partial_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return SystemError("open " + writer->partial_, errno);
    while (::flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return SystemError("flock " + writer->partial_, errno);
    }
    if (!SameFile(fd.get(), writer->partial_)) continue;
    if (Has(digest)) {  // finished by the writer we waited for (this is a fresh, empty file)
      (void)::unlink(writer->partial_.c_str());
      writer->done_ = true;
      return writer;
    }
    writer->fd_ = std::move(fd);
    break;
  }
  // Hash what an interrupted download left, to go on from its end.
  struct stat st;
  if (::fstat(writer->fd_.get(), &st) != 0) return SystemError("stat " + writer->partial_, errno);
  if (static_cast<uint64_t>(st.st_size) > size) {
    BH_TRY(writer->Restart());
    return writer;
  }
  char buf[1 << 16];
  uint64_t read_total = 0;
  while (read_total < static_cast<uint64_t>(st.st_size)) {
    ssize_t n = ::pread(writer->fd_.get(), buf, sizeof buf, static_cast<off_t>(read_total));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return SystemError("read " + writer->partial_, n < 0 ? errno : EIO);
    EVP_DigestUpdate(writer->hash_.get(), buf, static_cast<size_t>(n));
    read_total += static_cast<uint64_t>(n);
  }
  if (::lseek(writer->fd_.get(), static_cast<off_t>(read_total), SEEK_SET) < 0) return SystemError("seek " + writer->partial_, errno);
  writer->offset_ = read_total;
  return writer;
}

Status BlobStore::Adopt(const std::string& path, const std::string& digest) {
  if (!IsSha256Digest(digest)) return MakeError(ErrorCode::kInvalid, "not a sha256 digest: " + digest);
  if (Has(digest)) {
    (void)::unlink(path.c_str());
    return {};
  }
  if (::rename(path.c_str(), PathOf(digest).c_str()) != 0) return SystemError("rename " + path, errno);
  return {};
}

std::vector<std::string> BlobStore::List() const {
  std::vector<std::string> digests;
  for (const std::string& hex : Names(root_ + "/sha256")) {
    std::string digest = "sha256:" + hex;
    if (IsSha256Digest(digest)) digests.push_back(digest);
  }
  return digests;
}

Result<int64_t> BlobStore::RemoveAllBut(const std::set<std::string>& keep) {
  int64_t freed = 0;
  for (const std::string& digest : List()) {
    if (keep.contains(digest)) continue;
    struct stat st;
    if (::stat(PathOf(digest).c_str(), &st) == 0) freed += st.st_blocks * 512;
    if (::unlink(PathOf(digest).c_str()) != 0 && errno != ENOENT) return SystemError("unlink " + PathOf(digest), errno);
  }
  for (const std::string& name : Names(root_ + "/partial")) {
    std::string path = root_ + "/partial/" + name;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // a writer is at it
    struct stat st;
    if (::fstat(fd.get(), &st) == 0) freed += st.st_blocks * 512;
    if (SameFile(fd.get(), path)) (void)::unlink(path.c_str());
  }
  return freed;
}

BlobWriter::BlobWriter(std::string digest, uint64_t size, std::string partial, std::string final_path)
    : digest_(std::move(digest)), size_(size), partial_(std::move(partial)), final_(std::move(final_path)) {
  ResetHash();
}

void BlobWriter::HashDeleter::operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }

void BlobWriter::ResetHash() {
  if (!hash_) hash_.reset(EVP_MD_CTX_new());
  EVP_DigestInit_ex(hash_.get(), EVP_sha256(), nullptr);
}

Status BlobWriter::Append(std::string_view data) {
  if (data.size() > size_ - offset_) {
    return MakeError(ErrorCode::kInvalid,
                     "blob " + digest_ + " is larger than its manifest says (" + std::to_string(size_) + " bytes)",
                     "blob_too_large");
  }
  BH_TRY(WriteAll(fd_.get(), data, partial_));
  EVP_DigestUpdate(hash_.get(), data.data(), data.size());
  offset_ += data.size();
  return {};
}

Status BlobWriter::Restart() {
  if (::ftruncate(fd_.get(), 0) != 0) return SystemError("truncate " + partial_, errno);
  if (::lseek(fd_.get(), 0, SEEK_SET) != 0) return SystemError("seek " + partial_, errno);
  ResetHash();
  offset_ = 0;
  return {};
}

Status BlobWriter::Commit() {
  if (offset_ != size_) {
    return MakeError(ErrorCode::kBadGateway,
                     "blob " + digest_ + " ended after " + std::to_string(offset_) + " of " + std::to_string(size_) + " bytes",
                     "blob_truncated");
  }
  unsigned char sum[EVP_MAX_MD_SIZE];
  unsigned int sum_size = 0;
  EVP_DigestFinal_ex(hash_.get(), sum, &sum_size);
  if ("sha256:" + HexEncode(std::string_view(reinterpret_cast<char*>(sum), sum_size)) != digest_) {
    (void)::unlink(partial_.c_str());
    return MakeError(ErrorCode::kInvalid, "blob " + digest_ + " does not match its digest", "digest_mismatch");
  }
  if (::fdatasync(fd_.get()) != 0) return SystemError("sync " + partial_, errno);
  if (::rename(partial_.c_str(), final_.c_str()) != 0) return SystemError("rename " + partial_, errno);
  done_ = true;
  return {};
}

}  // namespace bulkhead::storage

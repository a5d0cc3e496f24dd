// The content-addressed store of pulled images' blobs (manifests, configs, layers):
//   blobs/sha256/<hex>    a blob, stored once however many images use it; 0600, root's
//   blobs/partial/<hex>   a download under way or interrupted, resumed by the next one
// A blob enters sha256/ only once its bytes hash to its name, so a reader never sees a wrong
// or half-written blob; a daemon killed mid-download leaves a partial file the next pull goes on from.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;  // <openssl/evp.h>

namespace bulkhead::storage {

class BlobWriter;

class BlobStore {
 public:
  // Makes root (0700) and its directories when missing.
  static Result<std::unique_ptr<BlobStore>> Open(const std::string& root);

  const std::string& root() const { return root_; }
  bool Has(const std::string& digest) const;
  // Where a stored blob is (whether or not it is there). digest: IsSha256Digest.
  std::string PathOf(const std::string& digest) const;
  // A stored blob read whole, kTooLarge past max_bytes; kNotFound if absent.
  Result<std::string> ReadSmall(const std::string& digest, size_t max_bytes) const;
  // Stores bytes already in memory (a manifest, a config) under their digest, which must match.
  Status Put(const std::string& digest, std::string_view data);

  // Writes `digest` (of `size` bytes) into the store from where an earlier, interrupted write
  // stopped. A second writer of the same blob waits here until the first is done (a lock on the
  // partial file, which the kernel drops if its holder dies); it then finds the blob stored
  // (BlobWriter::done()). kInvalid for a digest that is not IsSha256Digest.
  Result<std::unique_ptr<BlobWriter>> BeginWrite(const std::string& digest, uint64_t size);

  // A file this store made (under TempDir(), hashed as it was written) moved in as `digest`.
  Status Adopt(const std::string& path, const std::string& digest);
  // Where files on their way into the store are made (same filesystem: Adopt renames).
  std::string TempDir() const { return root_ + "/partial"; }

  // Every stored blob's digest.
  std::vector<std::string> List() const;
  // Removes the stored blobs not in `keep` and every partial download that no writer holds.
  // Answers the bytes freed. The caller keeps writers and readers of the kept set away meanwhile.
  Result<int64_t> RemoveAllBut(const std::set<std::string>& keep);

 private:
  explicit BlobStore(std::string root) : root_(std::move(root)) {}
  std::string PartialPath(const std::string& digest) const;
  std::string root_;
};

// One blob being written: append its bytes in order, then Commit. Destroyed without Commit,
// the bytes written so far stay in partial/ for the next writer to go on from.
class BlobWriter {
 public:
  BlobWriter(const BlobWriter&) = delete;
  BlobWriter& operator=(const BlobWriter&) = delete;

  // The blob is stored already (another writer finished it): nothing to write.
  bool done() const { return done_; }
  // Bytes in hand: where a download resumes (Range: bytes=offset-).
  uint64_t offset() const { return offset_; }
  uint64_t size() const { return size_; }
  // kInvalid (detail blob_too_large) past the declared size: a registry may not send more.
  Status Append(std::string_view data);
  // The server answered the whole blob instead of the range asked: start again from 0.
  Status Restart();
  // Checks the size and digest, then moves the blob into the store. A mismatch removes the
  // bytes (they are wrong, resuming them would only repeat the failure): kInvalid, detail
  // digest_mismatch.
  Status Commit();

 private:
  friend class BlobStore;
  BlobWriter(std::string digest, uint64_t size, std::string partial, std::string final_path);
  std::string digest_;
  uint64_t size_ = 0;
  std::string partial_;
  std::string final_;
  UniqueFd fd_;  // the partial file, appended to and locked (flock) while this writer lives
  uint64_t offset_ = 0;
  // SHA-256 by OpenSSL, not common/digest.h's nettle: its SHA-NI code hashes several times
  // faster, and every byte of a pull goes through here.
  struct HashDeleter {
    void operator()(EVP_MD_CTX* ctx) const;
  };
  std::unique_ptr<EVP_MD_CTX, HashDeleter> hash_;
  void ResetHash();
  bool done_ = false;
};

}  // namespace bulkhead::storage

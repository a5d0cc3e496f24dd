// The blob store: a blob is stored only once its bytes hash to its name, an interrupted
// write is resumed where it stopped, two writers of one blob do not interleave, wrong or
// oversized bytes never reach the store, and garbage collection keeps what it is told.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <future>
#include <string>

#include "common/digest.h"
#include "storage/blob_store.h"
#include "storage/fs_util.h"
#include "support/temp_state_dir.h"

namespace bulkhead::storage {
namespace {

std::string DigestOf(const std::string& data) { return "sha256:" + HexEncode(Sha256(data)); }

class BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = BlobStore::Open(dir_.path() + "/blobs");
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    store_ = std::move(*opened);
  }
  bulkhead::testing::TempStateDir dir_{"bulkhead-blobs"};
  std::unique_ptr<BlobStore> store_;
};

TEST_F(BlobStoreTest, StoresABlobUnderItsDigestReadableByRootAlone) {
  const std::string data(100000, 'x');
  const std::string digest = DigestOf(data);
  ASSERT_TRUE(store_->Put(digest, data).ok());
  EXPECT_TRUE(store_->Has(digest));
  EXPECT_EQ(*store_->ReadSmall(digest, 1 << 20), data);
  EXPECT_EQ(store_->ReadSmall(digest, 10).error().code, ErrorCode::kTooLarge);
  struct stat st;
  ASSERT_EQ(::stat(store_->PathOf(digest).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_.path() + "/blobs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(store_->List(), std::vector<std::string>{digest});
  EXPECT_TRUE(store_->Put(digest, data).ok()) << "storing it again is a no-op";
}

TEST_F(BlobStoreTest, WrongBytesNeverReachTheStore) {
  const std::string data = "the real bytes";
  const std::string digest = DigestOf(data);
  auto wrong = store_->Put(digest, "other bytes!!!");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().detail_code, "digest_mismatch");
  EXPECT_FALSE(store_->Has(digest));
  // More bytes than declared are refused as they arrive.
  auto writer = store_->BeginWrite(digest, data.size());
  ASSERT_TRUE(writer.ok());
  auto over = (*writer)->Append(data + "more");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().detail_code, "blob_too_large");
  writer->reset();
  // Fewer: the commit says the blob ended early, and the bytes stay for a resume.
  writer = store_->BeginWrite(digest, data.size());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Restart().ok());
  ASSERT_TRUE((*writer)->Append(data.substr(0, 4)).ok());
  auto early = (*writer)->Commit();
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.error().detail_code, "blob_truncated");
  EXPECT_FALSE(store_->Has(digest));
  EXPECT_FALSE(store_->Put("sha256:../../x", "x").ok()) << "a digest is never a path";
}

TEST_F(BlobStoreTest, AnInterruptedWriteIsResumedWhereItStopped) {
  std::string data;
  for (int i = 0; i < 50000; ++i) data += std::to_string(i);
  const std::string digest = DigestOf(data);
  {
    auto writer = store_->BeginWrite(digest, data.size());
    ASSERT_TRUE(writer.ok());
    EXPECT_EQ((*writer)->offset(), 0u);
    ASSERT_TRUE((*writer)->Append(data.substr(0, 12345)).ok());
  }  // dropped without a commit: a killed download
  auto writer = store_->BeginWrite(digest, data.size());
  ASSERT_TRUE(writer.ok());
  ASSERT_FALSE((*writer)->done());
  EXPECT_EQ((*writer)->offset(), 12345u);
  ASSERT_TRUE((*writer)->Append(data.substr(12345)).ok());
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(*ReadFile(store_->PathOf(digest)), data);
}

TEST_F(BlobStoreTest, ASecondWriterOfTheSameBlobWaitsAndFindsItStored) {
  const std::string data(1 << 20, 'q');
  const std::string digest = DigestOf(data);
  auto first = store_->BeginWrite(digest, data.size());
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->Append(data.substr(0, 1000)).ok());
  auto second = std::async(std::launch::async, [&] { return store_->BeginWrite(digest, data.size()); });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout) << "it waits for the first";
  ASSERT_TRUE((*first)->Append(data.substr(1000)).ok());
  ASSERT_TRUE((*first)->Commit().ok());
  first->reset();
  auto waited = second.get();
  ASSERT_TRUE(waited.ok());
  EXPECT_TRUE((*waited)->done());
  EXPECT_EQ(*ReadFile(store_->PathOf(digest)), data);
}

TEST_F(BlobStoreTest, GarbageCollectionKeepsWhatItIsToldAndHeldPartials) {
  const std::string a = "blob a", b = "blob b", c = "blob c";
  ASSERT_TRUE(store_->Put(DigestOf(a), a).ok());
  ASSERT_TRUE(store_->Put(DigestOf(b), b).ok());
  auto held = store_->BeginWrite(DigestOf(c), c.size());
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE((*held)->Append("blo").ok());
  auto freed = store_->RemoveAllBut({DigestOf(a)});
  ASSERT_TRUE(freed.ok());
  EXPECT_GT(*freed, 0);
  EXPECT_TRUE(store_->Has(DigestOf(a)));
  EXPECT_FALSE(store_->Has(DigestOf(b)));
  ASSERT_TRUE((*held)->Append("b c").ok());
  ASSERT_TRUE((*held)->Commit().ok()) << "a partial a writer holds is left alone";
  held->reset();
  {
    auto abandoned = store_->BeginWrite(DigestOf("blob d"), 6);
    ASSERT_TRUE((*abandoned)->Append("bl").ok());
  }
  ASSERT_TRUE(store_->RemoveAllBut({}).ok());
  EXPECT_TRUE(store_->List().empty());
  struct stat st;
  EXPECT_NE(::stat((dir_.path() + "/blobs/partial/" + DigestOf("blob d").substr(7)).c_str(), &st), 0)
      << "an abandoned partial download goes too";
}

}  // namespace
}  // namespace bulkhead::storage

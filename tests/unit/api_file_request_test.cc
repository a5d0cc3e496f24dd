#include "service/file_request.h"

#include <gtest/gtest.h>

#include <string>

#include "core/file_operation.h"

namespace bulkhead::api {
namespace {

using nlohmann::json;

json OpOf(const Result<FileRequest>& request, std::string_view workdir = "/workspace") {
  EXPECT_TRUE(request.ok()) << request.error().message;
  Result<json> op = FileOpJson(*request, workdir);
  EXPECT_TRUE(op.ok()) << op.error().message;
  return *op;
}

ErrorCode QueryErrorCode(FileOp op, const QueryParams& query) {
  Result<FileRequest> request = ParseFileQuery(op, query);
  EXPECT_FALSE(request.ok());
  return request.ok() ? ErrorCode::kInternal : request.error().code;
}

TEST(FileRequest, RelativePathsAreJoinedToTheWorkdirAbsoluteOnesKept) {
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kStat, {{"path", "a/b.txt"}}))["path"], "/workspace/a/b.txt");
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kStat, {{"path", "a"}}), "/")["path"], "/a");
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kStat, {{"path", "/etc/hosts"}}))["path"], "/etc/hosts");
  // Not normalised: the worker resolves ".." inside the sandbox.
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kStat, {{"path", "../x"}}))["path"], "/workspace/../x");
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kStat, {{"path", "/a"}}))["op"], "stat");
}

TEST(FileRequest, BadPathsAreRefused) {
  EXPECT_EQ(QueryErrorCode(FileOp::kRead, {}), ErrorCode::kInvalid);
  EXPECT_EQ(QueryErrorCode(FileOp::kRead, {{"path", ""}}), ErrorCode::kInvalid);
  EXPECT_EQ(QueryErrorCode(FileOp::kRead, {{"path", std::string("/a\0b", 4)}}), ErrorCode::kBadRequest);
  EXPECT_EQ(QueryErrorCode(FileOp::kRead, {{"path", "/" + std::string(4096, 'a')}}), ErrorCode::kInvalid);
  EXPECT_EQ(QueryErrorCode(FileOp::kRead, {{"path", "/bad\xff"}}), ErrorCode::kInvalid);
  EXPECT_TRUE(ParseFileQuery(FileOp::kRead, {{"path", "/" + std::string(4095, 'a')}}).ok());
  // A relative path that only grows too long once joined to the workdir.
  Result<FileRequest> near_limit = ParseFileQuery(FileOp::kRead, {{"path", std::string(4090, 'a')}});
  ASSERT_TRUE(near_limit.ok());
  EXPECT_EQ(FileOpJson(*near_limit, "/workspace").error().code, ErrorCode::kInvalid);
}

TEST(FileRequest, WriteTakesOctalModeAndAppend) {
  json op = OpOf(ParseFileQuery(FileOp::kWrite, {{"path", "/f"}, {"mode", "0640"}, {"append", "true"}}));
  EXPECT_EQ(op, json::parse(R"({"op": "write", "path": "/f", "mode": 416, "parents": true, "append": true})"));
  // Without a mode the worker keeps an existing file's mode.
  op = OpOf(ParseFileQuery(FileOp::kWrite, {{"path", "/f"}}));
  EXPECT_FALSE(op.contains("mode"));
  EXPECT_EQ(op["append"], false);
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kWrite, {{"path", "/f"}, {"mode", "7777"}}))["mode"], 07777);
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kWrite, {{"path", "/f"}, {"mode", "0"}}))["mode"], 0);
  for (const char* bad : {"", "0o644", "0648", "10000", "-1", "rw-r--r--", "0x1ff", "123456789"}) {
    EXPECT_EQ(QueryErrorCode(FileOp::kWrite, {{"path", "/f"}, {"mode", bad}}), ErrorCode::kInvalid) << bad;
  }
  EXPECT_EQ(QueryErrorCode(FileOp::kWrite, {{"path", "/f"}, {"append", "yes"}}), ErrorCode::kInvalid);
}

TEST(FileRequest, ListDepthIsOneToThirtyTwo) {
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kList, {{"path", "/w"}}))["depth"], 1);
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kList, {{"path", "/w"}, {"depth", "32"}}))["depth"], 32);
  for (const char* bad : {"0", "33", "-1", "", "1.5", "999999999999999999999"}) {
    EXPECT_EQ(QueryErrorCode(FileOp::kList, {{"path", "/w"}, {"depth", bad}}), ErrorCode::kInvalid) << bad;
  }
}

TEST(FileRequest, RecursiveDefaultsDifferForRemoveAndWatch) {
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kRemove, {{"path", "/d"}}))["recursive"], false);
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kRemove, {{"path", "/d"}, {"recursive", "true"}}))["recursive"], true);
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kWatch, {{"path", "/d"}}))["recursive"], true);
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kWatch, {{"path", "/d"}, {"recursive", "0"}}))["recursive"], false);
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kArchiveCreate, {{"path", "/d"}}))["op"], "archive_create");
  EXPECT_EQ(OpOf(ParseFileQuery(FileOp::kArchiveExtract, {{"path", "/d"}}))["op"], "archive_extract");
}

TEST(FileRequest, UserComesFromTheQuery) {
  Result<FileRequest> request = ParseFileQuery(FileOp::kRead, {{"path", "/f"}, {"user", "1000:1000"}});
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(request->user, "1000:1000");
  EXPECT_FALSE(ParseFileQuery(FileOp::kRead, {{"path", "/f"}})->user.has_value());
  EXPECT_EQ(QueryErrorCode(FileOp::kRead, {{"path", "/f"}, {"user", "no body"}}), ErrorCode::kInvalid);
}

TEST(FileRequest, MkdirBodyTakesParentsAndModeAsTextOrNumber) {
  json op = OpOf(ParseFileBody(FileOp::kMkdir, json{{"path", "d/e"}}, {}));
  EXPECT_EQ(op, json::parse(R"({"op": "mkdir", "path": "/workspace/d/e", "parents": true})"));
  op = OpOf(ParseFileBody(FileOp::kMkdir, json{{"path", "/d"}, {"parents", false}, {"mode", "0700"}}, {}));
  EXPECT_EQ(op["parents"], false);
  EXPECT_EQ(op["mode"], 0700);
  EXPECT_EQ(OpOf(ParseFileBody(FileOp::kMkdir, json{{"path", "/d"}, {"mode", 493}}, {}))["mode"], 0755);
  for (const json& bad : {json{{"path", "/d"}, {"mode", 4096}}, json{{"path", "/d"}, {"mode", -1}},
                          json{{"path", "/d"}, {"mode", 1.5}}, json{{"path", "/d"}, {"mode", "9"}},
                          json{{"path", "/d"}, {"parents", "yes"}}, json{{"path", 7}}, json::object(),
                          json{{"path", ""}}}) {
    Result<FileRequest> request = ParseFileBody(FileOp::kMkdir, bad, {});
    ASSERT_FALSE(request.ok()) << bad;
    EXPECT_EQ(request.error().code, ErrorCode::kInvalid) << bad;
  }
  EXPECT_EQ(ParseFileBody(FileOp::kMkdir, json{{"path", std::string("/a\0", 3)}}, {}).error().code,
            ErrorCode::kBadRequest);
}

TEST(FileRequest, MoveNeedsFromAndTo) {
  json op = OpOf(ParseFileBody(FileOp::kMove, json{{"from", "a"}, {"to", "/b"}}, {}));
  EXPECT_EQ(op, json::parse(R"({"op": "move", "from": "/workspace/a", "to": "/b"})"));
  EXPECT_FALSE(ParseFileBody(FileOp::kMove, json{{"from", "a"}}, {}).ok());
  EXPECT_FALSE(ParseFileBody(FileOp::kMove, json{{"to", "a"}}, {}).ok());
  EXPECT_FALSE(ParseFileBody(FileOp::kMove, json{{"from", "a"}, {"to", nullptr}}, {}).ok());
}

// ---- The worker's failures as API errors.

TEST(FileWorkerError, MapsTheWorkerCodesOntoHttp) {
  const std::pair<const char*, ErrorCode> cases[] = {
      {"not_found", ErrorCode::kNotFound},         {"exists", ErrorCode::kConflict},
      {"not_a_directory", ErrorCode::kConflict},   {"is_a_directory", ErrorCode::kConflict},
      {"not_empty", ErrorCode::kConflict},         {"permission_denied", ErrorCode::kForbidden},
      {"read_only", ErrorCode::kForbidden},        {"disk_full", ErrorCode::kDiskFull},
      {"invalid_argument", ErrorCode::kInvalid},   {"too_large", ErrorCode::kTooLarge},
      {"internal", ErrorCode::kInternal},
  };
  for (auto [code, mapped] : cases) {
    const std::string line = json{{"code", code}, {"message", "it failed"}}.dump() + "\n";
    Error error = core::FileWorkerError(line, std::nullopt);
    EXPECT_EQ(error.code, mapped) << code;
    EXPECT_EQ(error.detail_code, code);
    EXPECT_EQ(error.message, "it failed");
  }
  EXPECT_EQ(HttpStatus(core::FileWorkerError(R"({"code": "disk_full", "message": "m"})", std::nullopt).code), 507);
}

TEST(FileWorkerError, UnknownOrMissingCodesAreInternal) {
  Error unknown = core::FileWorkerError(R"({"code": "weird_new_code", "message": "m"})", std::nullopt);
  EXPECT_EQ(unknown.code, ErrorCode::kInternal);
  EXPECT_EQ(unknown.detail_code, "internal");
  Error garbage = core::FileWorkerError("Segmentation fault\n", std::nullopt);
  EXPECT_EQ(garbage.code, ErrorCode::kInternal);
  EXPECT_NE(garbage.message.find("Segmentation fault"), std::string::npos);
  Error killed = core::FileWorkerError("", 9);
  EXPECT_EQ(killed.code, ErrorCode::kInternal);
  EXPECT_NE(killed.message.find("signal 9"), std::string::npos);
  // The JSON line is found after other noise, and a trailing blank line does not hide it.
  Error after_noise = core::FileWorkerError("warning: x\n{\"code\": \"not_empty\", \"message\": \"d\"}\n\n", std::nullopt);
  EXPECT_EQ(after_noise.code, ErrorCode::kConflict);
  EXPECT_EQ(after_noise.detail_code, "not_empty");
}

}  // namespace
}  // namespace bulkhead::api

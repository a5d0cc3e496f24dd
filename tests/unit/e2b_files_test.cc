// The pure parts of the E2B front's envd filesystem and /files: the streaming multipart
// parser, gzip both ways, envd's paths, EntryInfo JSON (permissions string, owner names),
// ListDir's order, watch events and the watcher's event buffer.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "e2b/entry_info.h"
#include "e2b/envd_paths.h"
#include "e2b/gzip_stream.h"
#include "e2b/multipart.h"
#include "e2b/watchers.h"

namespace bulkhead::e2b {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------- multipart

struct ParsedPart {
  MultipartPart part;
  std::string data;
  bool ended = false;
};

// Feeds `body` in pieces of `piece` bytes (0 = all at once); the parts found, or the error.
Result<std::vector<ParsedPart>> ParseAll(const std::string& boundary, const std::string& body, size_t piece = 0) {
  MultipartParser parser(boundary);
  std::vector<ParsedPart> parts;
  std::vector<MultipartParser::Event> events;
  size_t pos = 0;
  do {
    const size_t n = piece == 0 ? body.size() : std::min(piece, body.size() - pos);
    events.clear();
    if (Status fed = parser.Feed(std::string_view(body).substr(pos, n), events); !fed.ok()) return fed.error();
    pos += n;
    for (auto& event : events) {
      switch (event.kind) {
        case MultipartParser::Event::kPartBegin: parts.push_back({std::move(event.part), {}, false}); break;
        case MultipartParser::Event::kData:
          EXPECT_FALSE(parts.empty());
          EXPECT_FALSE(event.data.empty());
          parts.back().data += event.data;
          break;
        case MultipartParser::Event::kPartEnd: parts.back().ended = true; break;
      }
    }
  } while (pos < body.size());
  if (Status done = parser.Finish(); !done.ok()) return done.error();
  return parts;
}

std::string Part(const std::string& boundary, const std::string& disposition, const std::string& data,
                 const std::string& extra_headers = "Content-Type: application/octet-stream\r\n") {
  return "--" + boundary + "\r\nContent-Disposition: " + disposition + "\r\n" + extra_headers + "\r\n" + data + "\r\n";
}

TEST(E2bMultipart, BoundaryFromContentType) {
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; boundary=abc123"), "abc123");
  EXPECT_EQ(*MultipartBoundary("Multipart/Form-Data;boundary=\"a b:c\""), "a b:c");
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; charset=utf-8; boundary=----WebKitFormBoundaryX"),
            "----WebKitFormBoundaryX");
  EXPECT_FALSE(MultipartBoundary("multipart/form-data").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=").ok());
  EXPECT_FALSE(MultipartBoundary("text/plain; boundary=x").ok());
  EXPECT_FALSE(MultipartBoundary("").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=\"unterminated").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=a; boundary=b").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=" + std::string(300, 'x')).ok());
  EXPECT_FALSE(MultipartBoundary(std::string("multipart/form-data; boundary=\"a\x01\"")).ok());
}

TEST(E2bMultipart, SeveralFilesWithPathsAsFilenames) {
  const std::string b = "XyZ";
  const std::string body = Part(b, "form-data; name=\"file\"; filename=\"dir/sub/a.txt\"", "hello") +
                           Part(b, "form-data; name=\"file\"; filename=\"/abs/b.bin\"", std::string("\0\r\n--Xy\r\n", 9)) +
                           Part(b, "form-data; name=\"file\"; filename=\"empty\"", "") + "--" + b + "--\r\n";
  for (size_t piece : {0, 1, 2, 3, 5, 7, 64}) {
    SCOPED_TRACE(piece);
    auto parts = ParseAll(b, body, piece);
    ASSERT_TRUE(parts.ok()) << parts.error().message;
    ASSERT_EQ(parts->size(), 3u);
    EXPECT_EQ((*parts)[0].part.name, "file");
    EXPECT_EQ(*(*parts)[0].part.filename, "dir/sub/a.txt");
    EXPECT_EQ((*parts)[0].data, "hello");
    EXPECT_EQ(*(*parts)[1].part.filename, "/abs/b.bin");
    EXPECT_EQ((*parts)[1].data, std::string("\0\r\n--Xy\r\n", 9));
    EXPECT_EQ((*parts)[1].part.content_type, "application/octet-stream");
    EXPECT_EQ((*parts)[2].data, "");
    for (const auto& p : *parts) EXPECT_TRUE(p.ended);
  }
}

TEST(E2bMultipart, EveryByteValueAndEverySplitPoint) {
  std::string data;
  for (int i = 0; i < 256; ++i) data += static_cast<char>(i);
  data += "\r\n--boun\r\n-bound\n--bound";  // near-delimiters inside the data
  const std::string b = "bound";
  const std::string body = "preamble to ignore\r\n" + Part(b, "form-data; name=\"file\"; filename=\"x\"", data) + "--" +
                           b + "--\r\nepilogue to ignore";
  for (size_t split = 0; split <= body.size(); ++split) {
    MultipartParser parser(b);
    std::vector<MultipartParser::Event> events;
    ASSERT_TRUE(parser.Feed(std::string_view(body).substr(0, split), events).ok());
    ASSERT_TRUE(parser.Feed(std::string_view(body).substr(split), events).ok());
    ASSERT_TRUE(parser.Finish().ok()) << split;
    std::string got;
    int begins = 0, ends = 0;
    for (auto& e : events) {
      if (e.kind == MultipartParser::Event::kData) got += e.data;
      begins += e.kind == MultipartParser::Event::kPartBegin;
      ends += e.kind == MultipartParser::Event::kPartEnd;
    }
    EXPECT_EQ(got, data) << split;
    EXPECT_EQ(begins, 1);
    EXPECT_EQ(ends, 1);
  }
}

TEST(E2bMultipart, HoldsBackOnlyADelimiterOfData) {
  // A large part fed in pieces comes out as it goes: memory stays bounded by the piece size.
  const std::string b = "b0undary";
  MultipartParser parser(b);
  std::vector<MultipartParser::Event> events;
  const std::string head = "--" + b + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big\"\r\n\r\n";
  ASSERT_TRUE(parser.Feed(head, events).ok());
  const std::string piece(64 * 1024, 'a');
  size_t out = 0;
  for (int i = 0; i < 100; ++i) {
    events.clear();
    ASSERT_TRUE(parser.Feed(piece, events).ok());
    for (auto& e : events) out += e.data.size();
    EXPECT_GE(out + b.size() + 4, size_t(i + 1) * piece.size());  // all but a delimiter's length is out
  }
  events.clear();
  ASSERT_TRUE(parser.Feed("\r\n--" + b + "--", events).ok());
  for (auto& e : events) out += e.data.size();
  EXPECT_EQ(out, 100 * piece.size());
  EXPECT_TRUE(parser.done());
}

TEST(E2bMultipart, FilenameForms) {
  const std::string b = "q";
  auto filename_of = [&](const std::string& disposition) -> std::optional<std::string> {
    auto parts = ParseAll(b, Part(b, disposition, "x") + "--q--");
    if (!parts.ok() || parts->size() != 1) return std::string("<error>");
    return (*parts)[0].part.filename;
  };
  EXPECT_EQ(filename_of("form-data; name=file; filename=plain.txt"), "plain.txt");
  EXPECT_EQ(filename_of("form-data; name=\"file\"; filename=\"a \\\"q\\\" b\""), "a \"q\" b");
  EXPECT_EQ(filename_of("form-data; name=\"file\"; filename=\"C:\\\\x\""), "C:\\x");
  EXPECT_EQ(filename_of("form-data; name=\"file\"; filename=\"../../etc/passwd\""), "../../etc/passwd");
  EXPECT_EQ(filename_of("form-data; name=\"file\"; filename*=UTF-8''d%C3%A9j%C3%A0/vu.txt"), "déjà/vu.txt");
  EXPECT_EQ(filename_of("form-data; name=\"file\""), std::nullopt);
  EXPECT_EQ(filename_of("form-data; name=\"file\"; filename*=latin1''x"), "<error>");
  EXPECT_EQ(filename_of("form-data; name=\"file\"; filename*=UTF-8''%zz"), "<error>");
  EXPECT_EQ(filename_of("form-data; name=\"file\"; filename=\"a\"; filename=\"b\""), "<error>");
}

TEST(E2bMultipart, HostileOrMalformedBodiesAreErrors) {
  const std::string b = "bnd";
  auto fails = [&](const std::string& body) {
    for (size_t piece : {0, 1, 3}) {
      if (ParseAll(b, body, piece).ok()) return false;
    }
    return true;
  };
  EXPECT_TRUE(fails(""));                                                    // nothing
  EXPECT_TRUE(fails("no delimiter at all"));                                 // wrong boundary
  EXPECT_TRUE(fails("--bnd\r\nContent-Disposition: form-data; name=file\r\n\r\ndata"));  // never closed
  EXPECT_TRUE(fails("--bnd\r\nContent-Disposition: form-data; name=file\r\n"));           // header never ends
  EXPECT_TRUE(fails("--bndX\r\n\r\n--bnd--"));                               // junk after a delimiter
  EXPECT_TRUE(fails("--bnd\r\nno colon here\r\n\r\nx\r\n--bnd--"));
  EXPECT_TRUE(fails("--bnd\r\n : empty name\r\n\r\nx\r\n--bnd--"));
  EXPECT_TRUE(fails("--bnd\r\nBad Name: x\r\n\r\nx\r\n--bnd--"));
  EXPECT_TRUE(fails("--bnd\r\nContent-Disposition: form-data;\r\n folded\r\n\r\nx\r\n--bnd--"));
  EXPECT_TRUE(fails("--bnd\r\nContent-Disposition: form-data; name=\"unterminated\r\n\r\nx\r\n--bnd--"));
  EXPECT_TRUE(fails("--bnd\r\nContent-Disposition: a\r\nContent-Disposition: b\r\n\r\nx\r\n--bnd--"));
  // A header over the limit, and too many header lines.
  EXPECT_TRUE(fails("--bnd\r\nX-Big: " + std::string(MultipartParser::kMaxHeaderBytes, 'h') + "\r\n\r\nx\r\n--bnd--"));
  std::string many = "--bnd\r\n";
  for (size_t i = 0; i <= MultipartParser::kMaxHeaderLines; ++i) many += "X-A: b\r\n";
  EXPECT_TRUE(fails(many + "\r\nx\r\n--bnd--"));
  // An endless header line without a line break is refused before it grows past the limit.
  MultipartParser parser(b);
  std::vector<MultipartParser::Event> events;
  ASSERT_TRUE(parser.Feed("--bnd\r\nX: ", events).ok());
  Status status;
  for (int i = 0; i < 100 && status.ok(); ++i) status = parser.Feed(std::string(1024, 'y'), events);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.error().code, ErrorCode::kBadRequest);
  // Once failed it stays failed.
  EXPECT_FALSE(parser.Feed("\r\n\r\n", events).ok());
  EXPECT_FALSE(parser.Finish().ok());
}

TEST(E2bMultipart, PartsWithoutDispositionAndTransportPadding) {
  const std::string body = "--z \t\r\n\r\nanonymous\r\n--z\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n"
                           "n\r\n--z--";
  auto parts = ParseAll("z", body, 2);
  ASSERT_TRUE(parts.ok()) << parts.error().message;
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].part.name, "");
  EXPECT_EQ((*parts)[0].data, "anonymous");
  EXPECT_EQ((*parts)[1].part.name, "note");
  EXPECT_FALSE((*parts)[1].part.filename);
}

// ---------------------------------------------------------------- gzip

std::string Inflate(const std::string& compressed, size_t piece, size_t slice, bool* ended = nullptr) {
  GzipInflater inflater;
  std::string out;
  for (size_t pos = 0; pos < compressed.size(); pos += piece) {
    const std::string_view in = std::string_view(compressed).substr(pos, piece);
    inflater.SetInput(in);
    for (;;) {
      Result<std::string> got = inflater.Next(slice);
      if (!got.ok()) return "<error>";
      EXPECT_LE(got->size(), slice);
      if (got->empty()) break;
      out += *got;
    }
  }
  if (ended) *ended = inflater.ended();
  return out;
}

TEST(E2bGzip, RoundTripsInPiecesOfAnySize) {
  std::mt19937 random(7);
  std::string data;
  for (int i = 0; i < 300000; ++i) data += static_cast<char>(i % 7 == 0 ? random() : 'a' + i % 13);
  GzipDeflater deflater;
  std::string compressed;
  for (size_t pos = 0; pos < data.size(); pos += 10000) {
    compressed += *deflater.Compress(std::string_view(data).substr(pos, 10000), false);
  }
  compressed += *deflater.Compress("", true);
  ASSERT_GT(compressed.size(), 18u);
  ASSERT_EQ(static_cast<unsigned char>(compressed[0]), 0x1f);
  ASSERT_EQ(static_cast<unsigned char>(compressed[1]), 0x8b);
  for (size_t piece : {1, 100, 65536}) {
    bool ended = false;
    EXPECT_EQ(Inflate(compressed, piece, 4096, &ended), data) << piece;
    EXPECT_TRUE(ended);
  }
}

TEST(E2bGzip, EmptyConcatenatedTruncatedAndGarbage) {
  GzipDeflater empty;
  const std::string nothing = *empty.Compress("", true);
  bool ended = false;
  EXPECT_EQ(Inflate(nothing, 1000, 100, &ended), "");
  EXPECT_TRUE(ended);

  GzipDeflater a, b;
  const std::string two = *a.Compress("first ", true) + *b.Compress("second", true);
  EXPECT_EQ(Inflate(two, 3, 2, &ended), "first second");
  EXPECT_TRUE(ended);

  GzipDeflater c;
  const std::string whole = *c.Compress(std::string(10000, 'z'), true);
  Inflate(whole.substr(0, whole.size() - 4), 1000, 1000, &ended);
  EXPECT_FALSE(ended);  // truncated: the caller must refuse it

  EXPECT_EQ(Inflate("this is not gzip at all", 1000, 1000), "<error>");
  EXPECT_EQ(Inflate(whole + "trailing junk!", 1000, 1 << 20), "<error>");
}

TEST(E2bGzip, ABombComesOutInBoundedSlices) {
  GzipDeflater deflater;
  std::string compressed;
  const std::string zeros(1 << 20, '\0');
  for (int i = 0; i < 64; ++i) compressed += *deflater.Compress(zeros, false);
  compressed += *deflater.Compress("", true);
  ASSERT_LT(compressed.size(), 256u * 1024);  // 64 MiB in well under 256 KiB
  GzipInflater inflater;
  inflater.SetInput(compressed);
  size_t total = 0;
  for (;;) {
    Result<std::string> slice = inflater.Next(256 * 1024);
    ASSERT_TRUE(slice.ok());
    ASSERT_LE(slice->size(), 256u * 1024);
    if (slice->empty()) break;
    total += slice->size();
  }
  EXPECT_EQ(total, 64u << 20);
  EXPECT_TRUE(inflater.ended());
}

// ---------------------------------------------------------------- paths

TEST(E2bPaths, ResolveLikeEnvd) {
  EXPECT_EQ(*ResolveEnvdPath("a.txt", "/home/user"), "/home/user/a.txt");
  EXPECT_EQ(*ResolveEnvdPath("./a/../b//c/", "/home/user"), "/home/user/b/c");
  EXPECT_EQ(*ResolveEnvdPath("~", "/home/user"), "/home/user");
  EXPECT_EQ(*ResolveEnvdPath("~/x", "/root"), "/root/x");
  EXPECT_EQ(*ResolveEnvdPath("/etc/../etc/passwd", "/root"), "/etc/passwd");
  EXPECT_EQ(*ResolveEnvdPath("../../../../../../etc", "/home/user"), "/etc");
  EXPECT_EQ(*ResolveEnvdPath("/..", "/root"), "/");
  EXPECT_EQ(*ResolveEnvdPath(".", "/home/user"), "/home/user");
  EXPECT_FALSE(ResolveEnvdPath("", "/root").ok());
  EXPECT_FALSE(ResolveEnvdPath("~other/x", "/root").ok());
  EXPECT_FALSE(ResolveEnvdPath(std::string("a\0b", 3), "/root").ok());
  EXPECT_FALSE(ResolveEnvdPath("\xff\xfe", "/root").ok());
  EXPECT_FALSE(ResolveEnvdPath(std::string(5000, 'a'), "/root").ok());
  EXPECT_EQ(ResolveEnvdPath("~other", "/root").error().code, ErrorCode::kBadRequest);
}

TEST(E2bPaths, NamesAndRelativePaths) {
  EXPECT_EQ(BaseName("/a/b.txt"), "b.txt");
  EXPECT_EQ(BaseName("/"), "/");
  EXPECT_EQ(DirName("/a/b.txt"), "/a");
  EXPECT_EQ(DirName("/a"), "/");
  EXPECT_EQ(DirName("/"), "/");
  EXPECT_EQ(RelativeTo("/home/user", "/home/user/x/y"), "x/y");
  EXPECT_EQ(RelativeTo("/home/user", "/home/user"), ".");
  EXPECT_EQ(RelativeTo("/", "/etc/x"), "etc/x");
  EXPECT_EQ(RelativeTo("/home/user", "/home/username/x"), "/home/username/x");
}

// ---------------------------------------------------------------- EntryInfo

TEST(E2bEntryInfo, GoFileModeStrings) {
  EXPECT_EQ(GoFileModeString("file", 0644), "-rw-r--r--");
  EXPECT_EQ(GoFileModeString("dir", 0755), "drwxr-xr-x");
  EXPECT_EQ(GoFileModeString("symlink", 0777), "Lrwxrwxrwx");
  EXPECT_EQ(GoFileModeString("dir", 01777), "dtrwxrwxrwx");
  EXPECT_EQ(GoFileModeString("file", 04755), "urwxr-xr-x");
  EXPECT_EQ(GoFileModeString("file", 02755), "grwxr-xr-x");
  EXPECT_EQ(GoFileModeString("file", 0), "----------");
  EXPECT_EQ(GoFileModeString("other", 0600), "?rw-------");
}

Accounts TestAccounts() {
  Accounts accounts;
  accounts.users = ParsePasswd("root:x:0:0:root:/root:/bin/bash\n# comment\nbroken line\nuser:x:1000:1000::/home/user:/bin/sh\n"
                               "dup:x:1000:5::/x:/bin/sh\nnohome:x:7:7:::\r\n");
  accounts.groups = ParseGroup("root:x:0:\nusers:x:100:user\nuser:x:1000:\nagain:x:1000:\nbad:x:notanumber:\n");
  return accounts;
}

TEST(E2bEntryInfo, AccountsFromPasswdAndGroup) {
  const Accounts accounts = TestAccounts();
  ASSERT_EQ(accounts.users.size(), 4u);
  EXPECT_EQ(accounts.FindName("user")->home, "/home/user");
  EXPECT_EQ(accounts.FindName("nohome")->home, "/");
  EXPECT_EQ(accounts.FindName("missing"), nullptr);
  EXPECT_EQ(accounts.OwnerName(1000), "user");  // the first line of a uid wins
  EXPECT_EQ(accounts.OwnerName(4242), "4242");
  EXPECT_EQ(accounts.GroupName(1000), "user");
  EXPECT_EQ(accounts.GroupName(100), "users");
  EXPECT_EQ(accounts.GroupName(55), "55");
}

TEST(E2bEntryInfo, ProtoJsonOfAnEntry) {
  const Accounts accounts = TestAccounts();
  const json file = {{"path", "/home/user/a.txt"}, {"name", "a.txt"}, {"type", "file"}, {"size", 5000000000ULL},
                     {"mode", 0644},  {"uid", 1000},  {"gid", 100},  {"mtime", "2026-11-29T21:00:00.123Z"}};
  const json info = *EntryInfoJson(file, accounts);
  EXPECT_EQ(info, (json{{"name", "a.txt"},
                        {"type", "FILE_TYPE_FILE"},
                        {"path", "/home/user/a.txt"},
                        {"size", "5000000000"},
                        {"mode", 420},
                        {"permissions", "-rw-r--r--"},
                        {"owner", "user"},
                        {"group", "users"},
                        {"modifiedTime", "2026-11-29T21:00:00.123Z"}}));

  // A symlink is described by what it leads to; its permissions, size and owner are its own.
  const json link = {{"path", "/d/l"},   {"name", "l"},      {"type", "symlink"},
                     {"size", 5},        {"mode", 0777},     {"uid", 0},
                     {"gid", 0},         {"mtime", "2026-01-01T00:00:00Z"},
                     {"target", "../x"}, {"resolved", "/x"}, {"target_type", "dir"},
                     {"target_mode", 0750}};
  const json link_info = *EntryInfoJson(link, accounts);
  EXPECT_EQ(link_info["type"], "FILE_TYPE_DIRECTORY");
  EXPECT_EQ(link_info["symlinkTarget"], "/x");
  EXPECT_EQ(link_info["mode"], 0750);
  EXPECT_EQ(link_info["permissions"], "Lrwxrwxrwx");
  EXPECT_EQ(link_info["size"], "5");
  EXPECT_EQ(link_info["owner"], "root");
  // One that leads nowhere: no type, no mode, itself as its target.
  json dangling = link;
  for (const char* key : {"resolved", "target_type", "target_mode"}) dangling.erase(key);
  const json dangling_info = *EntryInfoJson(dangling, accounts);
  EXPECT_EQ(dangling_info["type"], "FILE_TYPE_UNSPECIFIED");
  EXPECT_EQ(dangling_info["mode"], 0);
  EXPECT_EQ(dangling_info["symlinkTarget"], "/d/l");

  const json dir = {{"path", "/t"}, {"name", "t"}, {"type", "dir"}, {"size", 4096}, {"mode", 01777}, {"uid", 99}, {"gid", 98}};
  const json dir_info = *EntryInfoJson(dir, accounts);
  EXPECT_EQ(dir_info["type"], "FILE_TYPE_DIRECTORY");
  EXPECT_EQ(dir_info["mode"], 0777);
  EXPECT_EQ(dir_info["permissions"], "dtrwxrwxrwx");
  EXPECT_EQ(dir_info["owner"], "99");
  EXPECT_EQ(dir_info["group"], "98");
  EXPECT_FALSE(dir_info.contains("symlinkTarget"));

  const json other = {{"path", "/p"}, {"name", "p"}, {"type", "other"}, {"size", 0}, {"mode", 0600}, {"uid", 0}, {"gid", 0}};
  EXPECT_EQ((*EntryInfoJson(other, accounts))["type"], "FILE_TYPE_UNSPECIFIED");

  EXPECT_FALSE(EntryInfoJson(json{{"path", "/x"}}, accounts).ok());
  EXPECT_FALSE(EntryInfoJson(json::array(), accounts).ok());
  json negative = file;
  negative["size"] = -1;
  EXPECT_FALSE(EntryInfoJson(negative, accounts).ok());
}

TEST(E2bEntryInfo, ListDirOrderIsAWalkOfTheTreeInByteOrder) {
  auto entry = [](std::string path) { return json{{"name", path.substr(path.rfind('/') + 1)}, {"path", path}}; };
  std::vector<json> entries = {entry("/d/b.txt"),   entry("/d/a.txt"),   entry("/d/a/z"), entry("/d/B"),
                               entry("/d/a"),       entry("/d/a/y/deep"), entry("/d/a/y"), entry("/d/a-b"),
                               entry("/d/\xc3\xa9"), entry("/d/~")};
  SortEntryInfos(entries);
  std::vector<std::string> paths;
  for (const json& e : entries) paths.push_back(e["path"]);
  // Each directory right before its contents ("/d/a/y" before "/d/a-b" and "/d/a.txt", though
  // '-' and '.' sort before '/'); names byte for byte, so capitals first and UTF-8 last.
  EXPECT_EQ(paths, (std::vector<std::string>{"/d/B", "/d/a", "/d/a/y", "/d/a/y/deep", "/d/a/z", "/d/a-b", "/d/a.txt",
                                             "/d/b.txt", "/d/~", "/d/\xc3\xa9"}));
}

// ---------------------------------------------------------------- watch events

TEST(E2bWatch, EventsAreNamedRelativeToTheWatchedDirectory) {
  EXPECT_EQ(*FilesystemEventOf(json{{"type", "create"}, {"path", "/home/user/w/a.txt"}, {"dir", false}}, "/home/user/w"),
            (json{{"name", "a.txt"}, {"type", "EVENT_TYPE_CREATE"}}));
  EXPECT_EQ((*FilesystemEventOf(json{{"type", "write"}, {"path", "/w/sub/b"}}, "/w"))["name"], "sub/b");
  EXPECT_EQ((*FilesystemEventOf(json{{"type", "remove"}, {"path", "/w"}}, "/w"))["name"], ".");
  EXPECT_EQ((*FilesystemEventOf(json{{"type", "rename"}, {"path", "/w/x"}}, "/w"))["type"], "EVENT_TYPE_RENAME");
  EXPECT_EQ((*FilesystemEventOf(json{{"type", "chmod"}, {"path", "/w/x"}}, "/w"))["type"], "EVENT_TYPE_CHMOD");
  EXPECT_FALSE(FilesystemEventOf(json{{"type", "ready"}}, "/w"));
  EXPECT_FALSE(FilesystemEventOf(json{{"type", "mystery"}, {"path", "/w/x"}}, "/w"));
  EXPECT_FALSE(FilesystemEventOf(json::array(), "/w"));
  // includeEntry: the line's entry becomes the event's EntryInfo (given whom to name owners by).
  const json with_entry = {{"type", "write"}, {"path", "/w/x"},
                           {"entry", {{"path", "/w/x"}, {"name", "x"}, {"type", "file"}, {"size", 2}, {"mode", 0644},
                                      {"uid", 0}, {"gid", 0}, {"xattrs", {{"k", "v"}}}}}};
  Accounts accounts;
  accounts.users.push_back({"root", 0, 0, "/root"});
  const json event = *FilesystemEventOf(with_entry, "/w", &accounts);
  EXPECT_EQ(event["entry"]["owner"], "root");
  EXPECT_EQ(event["entry"]["metadata"], (json{{"k", "v"}}));
  EXPECT_EQ(event["entry"]["size"], "2");
  EXPECT_FALSE(FilesystemEventOf(with_entry, "/w")->contains("entry"));
}

TEST(E2bWatch, LinesAcrossPieces) {
  std::string pending;
  EXPECT_TRUE(TakeLines(pending, "{\"a\":").empty());
  EXPECT_EQ(TakeLines(pending, "1}\n{\"b\":2}\n{\"c\""), (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}"}));
  EXPECT_EQ(pending, "{\"c\"");
  EXPECT_EQ(TakeLines(pending, ":3}\n\n"), (std::vector<std::string>{"{\"c\":3}"}));
  EXPECT_EQ(pending, "");
}

TEST(E2bWatch, BufferKeepsTheNewestAndCountsTheDropped) {
  EventBuffer buffer(3);
  for (int i = 0; i < 5; ++i) buffer.Push(json{{"n", i}});
  EXPECT_EQ(buffer.size(), 3u);
  EXPECT_EQ(buffer.dropped(), 2u);
  const std::vector<json> events = buffer.Take();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["n"], 2);
  EXPECT_EQ(events[2]["n"], 4);
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_EQ(buffer.dropped(), 0u);
  EXPECT_TRUE(buffer.Take().empty());
}

}  // namespace
}  // namespace bulkhead::e2b

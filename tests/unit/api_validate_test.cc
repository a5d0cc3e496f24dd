#include "service/validate.h"

#include <gtest/gtest.h>

#include <string>

#include "http/encoding.h"

namespace bulkhead::api {
namespace {

using nlohmann::json;

const HostLimits kHost{.max_cpus = 4, .max_memory_mb = 8192};

// The 422 message of parsing `body` as a sandbox spec ("" if it was accepted).
std::string SpecError(const json& body) {
  auto spec = ParseSandboxSpec(body, kHost);
  if (spec.ok()) return "";
  EXPECT_EQ(spec.error().code, ErrorCode::kInvalid) << spec.error().message;
  return spec.error().message;
}

std::string ExecError(const json& body) {
  auto options = ParseExecOptions(body);
  if (options.ok()) return "";
  EXPECT_EQ(options.error().code, ErrorCode::kInvalid) << options.error().message;
  return options.error().message;
}

bool Mentions(const std::string& message, const std::string& field) {
  return message.find(field) != std::string::npos;
}

// ---- ParseJsonObject

TEST(ParseJsonObject, EmptyBodyIsAnEmptyObject) {
  auto body = ParseJsonObject("");
  ASSERT_TRUE(body.ok());
  EXPECT_TRUE(body->is_object());
  EXPECT_TRUE(body->empty());
}

TEST(ParseJsonObject, MalformedJsonIsBadRequest) {
  for (std::string text : {"{", "{\"a\":}", "nope", "{\"a\":1}x", "\xff", "{\"a\":\"\xff\"}"}) {
    auto body = ParseJsonObject(text);
    ASSERT_FALSE(body.ok()) << text;
    EXPECT_EQ(body.error().code, ErrorCode::kBadRequest) << text;
  }
}

TEST(ParseJsonObject, NonObjectIsInvalidArgument) {
  for (std::string text : {"[]", "1", "\"s\"", "null", "true"}) {
    auto body = ParseJsonObject(text);
    ASSERT_FALSE(body.ok()) << text;
    EXPECT_EQ(body.error().code, ErrorCode::kInvalid) << text;
  }
}

TEST(ParseJsonObject, DeepNestingIsRefusedWithoutCrashing) {
  const std::string deep = "{\"a\":" + std::string(500000, '[') + std::string(500000, ']') + "}";
  auto body = ParseJsonObject(deep);
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.error().code, ErrorCode::kBadRequest);
  const std::string unterminated(1 << 20, '[');
  EXPECT_FALSE(ParseJsonObject(unterminated).ok());
  // Moderate nesting is fine.
  EXPECT_TRUE(ParseJsonObject("{\"a\":" + std::string(30, '[') + std::string(30, ']') + "}").ok());
}

// ---- ParseSandboxSpec

TEST(ParseSandboxSpec, EmptyBodyGivesTheDefaults) {
  auto spec = ParseSandboxSpec(json::object(), kHost);
  ASSERT_TRUE(spec.ok());
  const core::SandboxSpec defaults;
  EXPECT_EQ(spec->image, defaults.image);
  EXPECT_EQ(spec->runtime, "native");
  EXPECT_EQ(spec->cpus, defaults.cpus);
  EXPECT_EQ(spec->memory_mb, defaults.memory_mb);
  EXPECT_EQ(spec->disk_mb, defaults.disk_mb);
  EXPECT_EQ(spec->pids, defaults.pids);
  EXPECT_EQ(spec->timeout_s, defaults.timeout_s);
  EXPECT_EQ(spec->idle_timeout_s, defaults.idle_timeout_s);
  EXPECT_EQ(spec->on_timeout, "kill");
  EXPECT_EQ(spec->workdir, "/workspace");
  EXPECT_EQ(spec->user, "root");
  EXPECT_EQ(spec->network.mode, "none");
  EXPECT_TRUE(spec->env.empty());
  EXPECT_TRUE(spec->metadata.empty());
}

TEST(ParseSandboxSpec, AcceptsAFullValidRequest) {
  const json body = {
      {"image", "python-3.12"}, {"runtime", "native"}, {"cpus", 0.5}, {"memory_mb", 512},
      {"disk_mb", 4096}, {"pids", 128}, {"timeout_s", 0}, {"idle_timeout_s", 60}, {"on_timeout", "kill"},
      {"env", {{"PATH_EXTRA", "/opt/bin"}, {"_X1", ""}}}, {"workdir", "/home/agent"}, {"user", "1000:1000"},
      {"network", {{"mode", "none"}, {"allow", json::array()}}}, {"metadata", {{"owner", "ci"}, {"run", "42"}}},
      {"volumes", json::array()}, {"from_snapshot", nullptr}, {"some_future_field", {1, 2, 3}}};
  auto spec = ParseSandboxSpec(body, kHost);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->image, "python-3.12");
  EXPECT_DOUBLE_EQ(spec->cpus, 0.5);
  EXPECT_EQ(spec->memory_mb, 512);
  EXPECT_EQ(spec->disk_mb, 4096);
  EXPECT_EQ(spec->pids, 128);
  EXPECT_EQ(spec->timeout_s, 0);
  EXPECT_EQ(spec->idle_timeout_s, 60);
  EXPECT_EQ(spec->env.at("PATH_EXTRA"), "/opt/bin");
  EXPECT_EQ(spec->env.at("_X1"), "");
  EXPECT_EQ(spec->workdir, "/home/agent");
  EXPECT_EQ(spec->user, "1000:1000");
  EXPECT_EQ(spec->metadata.at("owner"), "ci");
}

TEST(ParseSandboxSpec, NullMeansDefault) {
  auto spec = ParseSandboxSpec({{"image", nullptr}, {"cpus", nullptr}, {"env", nullptr}}, kHost);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->image, "host");
  EXPECT_EQ(spec->cpus, 1.0);
}

TEST(ParseSandboxSpec, ImageName) {
  EXPECT_EQ(SpecError({{"image", "a"}}), "");
  EXPECT_EQ(SpecError({{"image", "0a._-z"}}), "");
  EXPECT_EQ(SpecError({{"image", std::string(64, 'a')}}), "");
  // Registry references, pulled on first use (whether one resolves is the daemon's to say).
  for (std::string ref : std::vector<std::string>{"a/b", "a:1", "registry.example/team/py:3.12", "127.0.0.1:5000/x@sha256:" + std::string(64, 'e'),
                          std::string(65, 'a')}) {
    EXPECT_EQ(SpecError({{"image", ref}}), "") << ref;
  }
  for (std::string bad : std::vector<std::string>{"", "A", "-a", ".a", "_a", "../x", "a b", "é", "a/../b", "x@sha256:short", "r.example/A:1",
                          "r.example//x", "x:" + std::string(200, 't')}) {
    EXPECT_TRUE(Mentions(SpecError({{"image", bad}}), "image")) << bad;
  }
  EXPECT_TRUE(Mentions(SpecError({{"image", 7}}), "image"));
}

TEST(ParseSandboxSpec, Runtime) {
  EXPECT_EQ(SpecError({{"runtime", "native"}}), "");
  EXPECT_EQ(SpecError({{"runtime", "gvisor"}}), "");  // the core answers whether the host has it
  EXPECT_EQ(SpecError({{"runtime", "microvm"}}), "");
  EXPECT_TRUE(Mentions(SpecError({{"runtime", "docker"}}), "runtime"));
  EXPECT_TRUE(Mentions(SpecError({{"runtime", ""}}), "runtime"));
  EXPECT_TRUE(Mentions(SpecError({{"runtime", true}}), "runtime"));
}

TEST(ParseSandboxSpec, CpusRange) {
  EXPECT_EQ(SpecError({{"cpus", 0.05}}), "");
  EXPECT_EQ(SpecError({{"cpus", 4}}), "");
  for (json bad : {json(0.04), json(0), json(-1), json(4.01), json(1e308), json(-1e308)}) {
    EXPECT_TRUE(Mentions(SpecError({{"cpus", bad}}), "cpus")) << bad;
  }
  EXPECT_TRUE(Mentions(SpecError({{"cpus", "1"}}), "cpus"));
  EXPECT_TRUE(Mentions(SpecError({{"cpus", json::array({1})}}), "cpus"));
}

TEST(ParseSandboxSpec, IntegerRanges) {
  struct Case {
    const char* field;
    int64_t min, max;
  };
  for (const Case& c : {Case{"memory_mb", 32, 8192}, Case{"disk_mb", 64, 1048576}, Case{"pids", 16, 65536},
                        Case{"timeout_s", 0, 2592000}, Case{"idle_timeout_s", 0, 2592000}}) {
    EXPECT_EQ(SpecError({{c.field, c.min}}), "") << c.field;
    EXPECT_EQ(SpecError({{c.field, c.max}}), "") << c.field;
    EXPECT_TRUE(Mentions(SpecError({{c.field, c.min - 1}}), c.field)) << c.field;
    EXPECT_TRUE(Mentions(SpecError({{c.field, c.max + 1}}), c.field)) << c.field;
    EXPECT_TRUE(Mentions(SpecError({{c.field, "100"}}), c.field)) << c.field;
    EXPECT_TRUE(Mentions(SpecError({{c.field, 100.5}}), c.field)) << c.field;
    EXPECT_TRUE(Mentions(SpecError({{c.field, true}}), c.field)) << c.field;
    EXPECT_TRUE(Mentions(SpecError({{c.field, json::object()}}), c.field)) << c.field;
    // Absurd values of every JSON number kind.
    EXPECT_TRUE(Mentions(SpecError({{c.field, std::numeric_limits<uint64_t>::max()}}), c.field)) << c.field;
    EXPECT_TRUE(Mentions(SpecError({{c.field, std::numeric_limits<int64_t>::min()}}), c.field)) << c.field;
    EXPECT_TRUE(Mentions(SpecError({{c.field, 1e300}}), c.field)) << c.field;
  }
  // An integral float is an integer.
  auto spec = ParseSandboxSpec({{"memory_mb", 512.0}}, kHost);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->memory_mb, 512);
}

TEST(ParseSandboxSpec, SmallIntegersFromJsonTextAreRejected) {
  // Parsed from text, a non-negative number is unsigned JSON: the minimum must still hold.
  for (const char* text : {R"({"pids": 0})", R"({"pids": 1})", R"({"memory_mb": 1})", R"({"disk_mb": 1})"}) {
    auto body = ParseJsonObject(text);
    ASSERT_TRUE(body.ok()) << text;
    EXPECT_FALSE(ParseSandboxSpec(*body, kHost).ok()) << text;
  }
}

TEST(ParseSandboxSpec, HugeIntegersFromJsonTextAreRejected) {
  auto body = ParseJsonObject(R"({"pids": 99999999999999999999999999999, "memory_mb": 64})");
  ASSERT_TRUE(body.ok());
  EXPECT_TRUE(Mentions(SpecError(*body), "pids"));
}

TEST(ParseSandboxSpec, OnTimeout) {
  EXPECT_EQ(SpecError({{"on_timeout", "kill"}}), "");
  EXPECT_EQ(SpecError({{"on_timeout", "pause"}}), "");
  EXPECT_EQ(SpecError({{"on_timeout", "stop"}}), "");
  EXPECT_TRUE(Mentions(SpecError({{"on_timeout", "explode"}}), "on_timeout"));
  EXPECT_TRUE(Mentions(SpecError({{"on_timeout", 1}}), "on_timeout"));
}

TEST(ParseSandboxSpec, Env) {
  EXPECT_EQ(SpecError({{"env", {{"A", "1"}, {"_b2", "x y"}}}}), "");
  for (std::string bad : {"", "1A", "A-B", "A=B", "A B", "É"}) {
    EXPECT_TRUE(Mentions(SpecError({{"env", {{bad, "v"}}}}), "env")) << bad;
  }
  EXPECT_TRUE(Mentions(SpecError({{"env", {{"A", 1}}}}), "env.A"));
  EXPECT_TRUE(Mentions(SpecError({{"env", {{"A", std::string("a\0b", 3)}}}}), "NUL"));
  EXPECT_TRUE(Mentions(SpecError({{"env", json::array({"A=1"})}}), "env"));
  EXPECT_TRUE(Mentions(SpecError({{"env", "A=1"}}), "env"));
  // 256 KiB in total is the limit.
  EXPECT_EQ(SpecError({{"env", {{"A", std::string(kMaxEnvBytes - 1, 'x')}}}}), "");
  EXPECT_TRUE(Mentions(SpecError({{"env", {{"A", std::string(kMaxEnvBytes, 'x')}}}}), "env"));
  json many = json::object();
  for (int i = 0; i < 3000; ++i) many["V" + std::to_string(i)] = std::string(100, 'x');
  EXPECT_TRUE(Mentions(SpecError({{"env", many}}), "env"));
}

TEST(ParseSandboxSpec, Workdir) {
  EXPECT_EQ(SpecError({{"workdir", "/"}}), "");
  EXPECT_EQ(SpecError({{"workdir", "/" + std::string(4095, 'a')}}), "");
  EXPECT_TRUE(Mentions(SpecError({{"workdir", "/" + std::string(4096, 'a')}}), "workdir"));
  EXPECT_TRUE(Mentions(SpecError({{"workdir", "relative/path"}}), "workdir"));
  EXPECT_TRUE(Mentions(SpecError({{"workdir", ""}}), "workdir"));
  EXPECT_TRUE(Mentions(SpecError({{"workdir", std::string("/a\0b", 4)}}), "workdir"));
  EXPECT_TRUE(Mentions(SpecError({{"workdir", 1}}), "workdir"));
}

TEST(ParseSandboxSpec, User) {
  for (std::string good : std::vector<std::string>{"root", "_apt", "user-1", "a", "0", "1000", "1000:1000", "4294967294",
                           std::string(32, 'a')}) {
    EXPECT_EQ(SpecError({{"user", good}}), "") << good;
  }
  for (std::string bad : std::vector<std::string>{"", "Root", "1user", "-x", "a b", "1000:", ":1000", "1:2:3", "4294967295",
                          "99999999999", "-1", "root:root", std::string(33, 'a')}) {
    EXPECT_TRUE(Mentions(SpecError({{"user", bad}}), "user")) << bad;
  }
  EXPECT_TRUE(Mentions(SpecError({{"user", 1000}}), "user"));
}

TEST(ParseSandboxSpec, Network) {
  EXPECT_EQ(SpecError({{"network", {{"mode", "none"}}}}), "");
  EXPECT_EQ(SpecError({{"network", json::object()}}), "");
  EXPECT_EQ(SpecError({{"network", {{"mode", "allowlist"}}}}), "");  // allows nothing yet
  EXPECT_EQ(SpecError({{"network", {{"mode", "allowlist"}, {"allow", {"a.test", "*.b.test:443", "10.0.0.0/8"}}}}}), "");
  EXPECT_EQ(SpecError({{"network", {{"mode", "open"}}}}), "");
  EXPECT_TRUE(Mentions(SpecError({{"network", {{"mode", "bridge"}}}}), "network"));
  EXPECT_TRUE(Mentions(SpecError({{"network", {{"mode", 1}}}}), "network.mode"));
  EXPECT_TRUE(Mentions(SpecError({{"network", "none"}}), "network"));
  EXPECT_TRUE(Mentions(SpecError({{"network", {{"allow", "example.com"}}}}), "network.allow"));
  EXPECT_TRUE(Mentions(SpecError({{"network", {{"allow", {1}}}}}), "network.allow"));
  EXPECT_TRUE(Mentions(SpecError({{"network", {{"mode", "allowlist"}, {"proxy", true}}}}), "network.proxy"));
  // With mode none an allow list would be silently useless.
  EXPECT_NE(SpecError({{"network", {{"allow", {"example.com"}}}}}), "");
  // Entries are checked one by one: a typo never silently widens or voids the policy.
  for (const char* bad : {"", "*", "*.", "exa mple.com", "10.0.0.1/8", "1.2.3.4:0", "1.2.3.4:65536", "a..b"}) {
    EXPECT_NE(SpecError({{"network", {{"mode", "allowlist"}, {"allow", {bad}}}}}), "") << bad;
  }
  // open takes address entries only (they re-open always-denied ranges).
  EXPECT_EQ(SpecError({{"network", {{"mode", "open"}, {"allow", {"10.1.2.3:5432"}}}}}), "");
  EXPECT_NE(SpecError({{"network", {{"mode", "open"}, {"allow", {"a.test"}}}}}), "");
}

TEST(ParseSandboxSpec, PreviewIsPublicUnlessAskedAndItsTokenIsNeverTheClients) {
  auto spec = ParseSandboxSpec(json::object(), kHost);
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->preview.is_public);
  spec = ParseSandboxSpec({{"preview", {{"public", false}}}}, kHost);
  ASSERT_TRUE(spec.ok());
  EXPECT_FALSE(spec->preview.is_public);
  EXPECT_EQ(spec->preview.token, "");  // the manager issues it
  EXPECT_EQ(SpecError({{"preview", {{"public", true}}}}), "");
  EXPECT_EQ(SpecError({{"preview", json::object()}}), "");
  EXPECT_EQ(SpecError({{"preview", nullptr}}), "");
  EXPECT_TRUE(Mentions(SpecError({{"preview", false}}), "preview must be an object"));
  EXPECT_TRUE(Mentions(SpecError({{"preview", "private"}}), "preview must be an object"));
  EXPECT_TRUE(Mentions(SpecError({{"preview", {{"public", "false"}}}}), "preview.public must be a boolean"));
  EXPECT_TRUE(Mentions(SpecError({{"preview", {{"public", 0}}}}), "preview.public must be a boolean"));
  EXPECT_TRUE(Mentions(SpecError({{"preview", {{"public", false}, {"token", "chosen"}}}}), "preview.token"));
  EXPECT_TRUE(Mentions(SpecError({{"preview", {{"pubic", false}}}}), "preview.pubic is not a known field"));
}

TEST(ParseNetworkUpdate, SameRulesAsCreate) {
  auto ok = ParseNetworkUpdate({{"mode", "allowlist"}, {"allow", {"a.test"}}});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->mode, "allowlist");
  EXPECT_EQ(ok->allow, std::vector<std::string>{"a.test"});
  EXPECT_FALSE(ParseNetworkUpdate({{"mode", "everything"}}).ok());
  EXPECT_FALSE(ParseNetworkUpdate(json::array()).ok());
  EXPECT_EQ(ParseNetworkUpdate(json::object())->mode, "none");
}

TEST(ParseEgressLimit, Bounds) {
  EXPECT_EQ(*ParseEgressLimit({}), 1000);
  EXPECT_EQ(*ParseEgressLimit({{"limit", "1"}}), 1);
  EXPECT_EQ(*ParseEgressLimit({{"limit", "10000"}}), 10000);
  for (const char* bad : {"0", "10001", "-1", "x", "", "99999999999999999999"})
    EXPECT_FALSE(ParseEgressLimit({{"limit", bad}}).ok()) << bad;
  EXPECT_FALSE(ParseEgressLimit({{"since", "1"}}).ok());
}

TEST(ParseSandboxSpec, Metadata) {
  json entries = json::object();
  for (int i = 0; i < 64; ++i) entries["k" + std::to_string(i)] = "v";
  EXPECT_EQ(SpecError({{"metadata", entries}}), "");
  entries["one-too-many"] = "v";
  EXPECT_TRUE(Mentions(SpecError({{"metadata", entries}}), "metadata"));
  EXPECT_EQ(SpecError({{"metadata", {{std::string(128, 'k'), std::string(1024, 'v')}}}}), "");
  EXPECT_TRUE(Mentions(SpecError({{"metadata", {{std::string(129, 'k'), "v"}}}}), "metadata"));
  EXPECT_TRUE(Mentions(SpecError({{"metadata", {{"k", std::string(1025, 'v')}}}}), "metadata.k"));
  EXPECT_TRUE(Mentions(SpecError({{"metadata", {{"", "v"}}}}), "metadata"));
  EXPECT_TRUE(Mentions(SpecError({{"metadata", {{"k", 1}}}}), "metadata.k"));
  EXPECT_TRUE(Mentions(SpecError({{"metadata", {{"k", nullptr}}}}), "metadata.k"));
  EXPECT_TRUE(Mentions(SpecError({{"metadata", json::array()}}), "metadata"));
}

TEST(ParseSandboxSpec, FromSnapshotTakesTheSnapshotsImageUnlessOneIsNamed) {
  auto spec = ParseSandboxSpec({{"from_snapshot", "snap_1"}}, kHost);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->from_snapshot, "snap_1");
  EXPECT_EQ(spec->image, "");  // the manager fills in the snapshot's
  spec = ParseSandboxSpec({{"from_snapshot", "snap_1"}, {"image", "alpine"}}, kHost);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->image, "alpine");  // the manager checks it is the snapshot's
  EXPECT_FALSE(ParseSandboxSpec(json::object(), kHost)->from_snapshot.has_value());
  EXPECT_TRUE(Mentions(SpecError({{"from_snapshot", 7}}), "from_snapshot"));
  EXPECT_TRUE(Mentions(SpecError({{"from_snapshot", ""}}), "from_snapshot"));
  EXPECT_TRUE(Mentions(SpecError({{"from_snapshot", std::string(129, 's')}}), "from_snapshot"));
}

TEST(ParseSnapshotRequest, MemoryIsABooleanFalseWhenAbsent) {
  EXPECT_FALSE(ParseSnapshotRequest(json::object())->memory);
  EXPECT_FALSE(ParseSnapshotRequest({{"memory", false}})->memory);
  EXPECT_FALSE(ParseSnapshotRequest({{"memory", nullptr}})->memory);
  auto both = ParseSnapshotRequest({{"memory", true}, {"name", "n"}});
  EXPECT_TRUE(both->memory);
  EXPECT_EQ(both->name, "n");
  EXPECT_TRUE(ParseForkRequest({{"memory", true}, {"count", 3}})->memory);
  EXPECT_EQ(ParseForkRequest({{"memory", true}, {"count", 3}})->count, 3);
  EXPECT_FALSE(ParseForkRequest({{"memory", false}})->memory);
  for (const json& wrong : {json(1), json("true"), json::array()}) {
    auto snapshot = ParseSnapshotRequest({{"memory", wrong}});
    ASSERT_FALSE(snapshot.ok());
    EXPECT_EQ(snapshot.error().message, "memory must be a boolean");
    auto fork = ParseForkRequest({{"memory", wrong}});
    ASSERT_FALSE(fork.ok());
    EXPECT_EQ(fork.error().message, "memory must be a boolean");
  }
}

TEST(ParseSnapshotRequest, NameIsOptionalAndBounded) {
  EXPECT_EQ(ParseSnapshotRequest(json::object())->name, "");
  EXPECT_EQ(ParseSnapshotRequest({{"name", "before upgrade"}})->name, "before upgrade");
  EXPECT_EQ(ParseSnapshotRequest({{"name", std::string(128, 'n')}})->name, std::string(128, 'n'));
  EXPECT_FALSE(ParseSnapshotRequest({{"name", std::string(129, 'n')}}).ok());
  EXPECT_FALSE(ParseSnapshotRequest({{"name", ""}}).ok());
  EXPECT_FALSE(ParseSnapshotRequest({{"name", "a\nb"}}).ok());
  EXPECT_FALSE(ParseSnapshotRequest({{"name", 3}}).ok());
}

TEST(ParseForkRequest, CountIsOneToSixteen) {
  EXPECT_EQ(ParseForkRequest(json::object())->count, 1);
  EXPECT_EQ(ParseForkRequest({{"count", 16}})->count, 16);
  for (const json& bad : {json(0), json(17), json(-1), json("x"), json(2.5), json(true)}) {
    EXPECT_EQ(ParseForkRequest({{"count", bad}}).error().code, ErrorCode::kInvalid) << bad;
  }
}

json Volume(const std::string& name, const std::string& path) { return {{"name", name}, {"path", path}}; }

TEST(ParseSandboxSpec, VolumesAreParsedInOrder) {
  auto spec = ParseSandboxSpec(
      {{"volumes", {Volume("cache", "/cache"), {{"name", "data.v2"}, {"path", "/srv/data"}, {"read_only", true}}}}},
      kHost);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  ASSERT_EQ(spec->volumes.size(), 2u);
  EXPECT_EQ(spec->volumes[0].name, "cache");
  EXPECT_EQ(spec->volumes[0].path, "/cache");
  EXPECT_FALSE(spec->volumes[0].read_only);
  EXPECT_EQ(spec->volumes[1].name, "data.v2");
  EXPECT_EQ(spec->volumes[1].path, "/srv/data");
  EXPECT_TRUE(spec->volumes[1].read_only);
  EXPECT_EQ(SpecError({{"volumes", json::array()}}), "");
  EXPECT_TRUE(ParseSandboxSpec(json::object(), kHost)->volumes.empty());
}

TEST(ParseSandboxSpec, SudoUsersAreNamesOrUids) {
  auto spec = ParseSandboxSpec({{"sudo_users", {"user", "1000"}}}, kHost);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->sudo_users, (std::vector<std::string>{"user", "1000"}));
  EXPECT_TRUE(ParseSandboxSpec(json::object(), kHost)->sudo_users.empty());
  EXPECT_TRUE(Mentions(SpecError({{"sudo_users", "user"}}), "sudo_users must be an array"));
  // init takes them comma-separated: nothing that could split or smuggle an entry.
  for (const json& bad : {json("a,b"), json("1000:1000"), json(""), json("Root"), json(1000), json("x\n")}) {
    EXPECT_TRUE(Mentions(SpecError({{"sudo_users", {bad}}}), "sudo_users[0] must be a user name or a uid")) << bad;
  }
  EXPECT_TRUE(Mentions(SpecError({{"sudo_users", json(std::vector<std::string>(17, "user"))}}), "more than 16"));
}

TEST(ParseSandboxSpec, VolumeShapeAndNames) {
  EXPECT_TRUE(Mentions(SpecError({{"volumes", "cache"}}), "volumes must be an array"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {"cache"}}}), "volumes[0]"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {{{"path", "/c"}}}}}), "volumes[0].name"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {{{"name", "c"}}}}}), "volumes[0].path"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {{{"name", "c"}, {"path", 5}}}}}), "volumes[0].path"));
  for (const char* bad : {"", "Cache", "-c", ".c", "_c", "a/b", "a b", "ca\xc3\xa9"}) {
    EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume(bad, "/c")}}}), "volumes[0].name")) << bad;
  }
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume(std::string(64, 'a'), "/c")}}}), "volumes[0].name"));
  EXPECT_EQ(SpecError({{"volumes", {Volume(std::string(63, 'a'), "/c")}}}), "");
  // A misspelt read_only must not mount read-write without a word.
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {{{"name", "c"}, {"path", "/c"}, {"readonly", true}}}}}),
                       "volumes[0].readonly"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {{{"name", "c"}, {"path", "/c"}, {"read_only", "yes"}}}}}),
                       "read_only"));
  json many = json::array();
  for (int i = 0; i < 17; i++) many.push_back(Volume("v", "/v" + std::to_string(i)));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", many}}), "16"));
  many.erase(many.begin());
  EXPECT_EQ(SpecError({{"volumes", many}}), "");
}

TEST(ParseSandboxSpec, VolumePathsAreAbsoluteNormalizedAndOutsideKernelFileSystems) {
  for (const char* good : {"/cache", "/a/b/c", "/workspace", "/home/user/.cache", "/procfs", "/devices", "/a..b"}) {
    EXPECT_EQ(SpecError({{"volumes", {Volume("v", good)}}}), "") << good;
  }
  for (const char* bad : {"", "cache", "./c", "/", "//", "/c/", "/a//b", "/a/./b", "/a/../b", "/..", "/.",
                          "/proc", "/proc/sys", "/sys", "/sys/fs/cgroup", "/dev", "/dev/shm"}) {
    EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume("v", bad)}}}), "volumes[0].path")) << bad;
  }
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume("v", std::string("/a\0b", 4))}}}), "NUL"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume("v", "/" + std::string(300, 'a'))}}}), "255"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume("v", "/a" + std::string(1100, 'a'))}}}), "bytes"));
}

TEST(ParseSandboxSpec, VolumePathsMustNotOverlap) {
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume("a", "/c"), Volume("b", "/c")}}}), "volumes[1].path"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume("a", "/c"), Volume("b", "/c/d")}}}), "overlaps"));
  EXPECT_TRUE(Mentions(SpecError({{"volumes", {Volume("a", "/c/d"), Volume("b", "/c")}}}), "overlaps"));
  // Siblings and name prefixes are fine, and so is one volume at two places.
  EXPECT_EQ(SpecError({{"volumes", {Volume("a", "/c"), Volume("b", "/cd"), Volume("a", "/e/c")}}}), "");
}

TEST(ParseVolumeRequest, NameAndSize) {
  auto request = ParseVolumeRequest({{"name", "cache"}});
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(request->name, "cache");
  EXPECT_EQ(request->size_mb, kDefaultVolumeSizeMb);
  request = ParseVolumeRequest({{"name", "a_b.c-9"}, {"size_mb", 1048576}});
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(request->size_mb, 1048576);
  for (const json& bad : {json{{"size_mb", 10}}, json{{"name", 5}}, json{{"name", "Bad"}}, json{{"name", ""}},
                          json{{"name", std::string(64, 'x')}}, json{{"name", "ok"}, {"size_mb", 0}},
                          json{{"name", "ok"}, {"size_mb", -1}}, json{{"name", "ok"}, {"size_mb", 1048577}},
                          json{{"name", "ok"}, {"size_mb", 1.5}}, json{{"name", "ok"}, {"size_mb", "10"}}}) {
    auto parsed = ParseVolumeRequest(bad);
    ASSERT_FALSE(parsed.ok()) << bad.dump();
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalid) << bad.dump();
  }
}

TEST(ParseSandboxSpec, HostLimitsBoundCpusAndMemory) {
  const HostLimits small{.max_cpus = 1, .max_memory_mb = 512};
  EXPECT_FALSE(ParseSandboxSpec({{"cpus", 2}}, small).ok());
  EXPECT_FALSE(ParseSandboxSpec({{"memory_mb", 513}}, small).ok());
  EXPECT_TRUE(ParseSandboxSpec({{"memory_mb", 512}}, small).ok());
  const HostLimits detected = HostLimits::Detect();
  EXPECT_GE(detected.max_cpus, 1);
  EXPECT_GT(detected.max_memory_mb, 32);
}

// ---- ParseExecOptions

TEST(ParseExecOptions, ArgvAndDefaults) {
  auto options = ParseExecOptions({{"cmd", {"python3", "-c", "print(1)"}}});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->request.argv, (std::vector<std::string>{"python3", "-c", "print(1)"}));
  EXPECT_EQ(options->request.timeout_s, 60);
  EXPECT_EQ(options->max_output_bytes, 16 * 1024 * 1024);
  EXPECT_FALSE(options->request.cwd);
  EXPECT_FALSE(options->request.user);
  EXPECT_FALSE(options->request.stdin_data);
  EXPECT_TRUE(options->request.env.empty());
}

TEST(ParseExecOptions, StringCommandRunsUnderShell) {
  auto options = ParseExecOptions({{"cmd", "echo hi | wc -c"}});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->request.argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hi | wc -c"}));
}

TEST(ParseExecOptions, CmdRules) {
  EXPECT_TRUE(Mentions(ExecError(json::object()), "cmd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", nullptr}}), "cmd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", ""}}), "cmd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", json::array()}}), "cmd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", {"ls", 1}}}), "cmd[1]"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", {"ls", nullptr}}}), "cmd[1]"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", {""}}}), "cmd[0]"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", {"ls", std::string("a\0b", 3)}}}), "cmd[1]"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", std::string("ls\0", 3)}}), "cmd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", 42}}), "cmd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", {{"a", "b"}}}}), "cmd"));
  // 1 MiB of argv in total.
  EXPECT_EQ(ExecError({{"cmd", {"echo", std::string(512 * 1024, 'x')}}}), "");
  EXPECT_TRUE(Mentions(ExecError({{"cmd", {"echo", std::string(kMaxArgvBytes, 'x')}}}), "cmd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", std::string(kMaxArgvBytes + 1, 'x')}}), "cmd"));
  json many = json::array();
  for (int i = 0; i < 20000; ++i) many.push_back(std::string(60, 'x'));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", many}}), "cmd"));
}

TEST(ParseExecOptions, CwdEnvUser) {
  auto options = ParseExecOptions(
      {{"cmd", {"ls"}}, {"cwd", "/tmp"}, {"env", {{"A", "1"}}}, {"user", "nobody"}});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->request.cwd, "/tmp");
  EXPECT_EQ(options->request.env.at("A"), "1");
  EXPECT_EQ(options->request.user, "nobody");
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"cwd", "tmp"}}), "cwd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"cwd", 1}}), "cwd"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"env", {{"1X", "v"}}}}), "env"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"user", "Bad User"}}), "user"));
}

TEST(ParseExecOptions, Stdin) {
  auto text = ParseExecOptions({{"cmd", "cat"}, {"stdin", "hello"}});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->request.stdin_data, "hello");
  auto binary = ParseExecOptions({{"cmd", "cat"}, {"stdin_b64", Base64Encode(std::string("\x00\xff", 2))}});
  ASSERT_TRUE(binary.ok());
  EXPECT_EQ(binary->request.stdin_data, std::string("\x00\xff", 2));
  auto empty = ParseExecOptions({{"cmd", "cat"}, {"stdin", ""}});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->request.stdin_data, "");

  EXPECT_TRUE(Mentions(ExecError({{"cmd", "cat"}, {"stdin", "a"}, {"stdin_b64", "YQ=="}}), "stdin"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "cat"}, {"stdin_b64", "not base64!"}}), "stdin_b64"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "cat"}, {"stdin_b64", 5}}), "stdin_b64"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "cat"}, {"stdin", json::array()}}), "stdin"));
  // 16 MiB decoded is the limit; refused before decoding.
  const std::string big(kMaxStdinBytes / 3 * 4 + 8, 'A');
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "cat"}, {"stdin_b64", big}}), "stdin_b64"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "cat"}, {"stdin", std::string(kMaxStdinBytes + 1, 'x')}}), "stdin"));
}

TEST(ParseExecOptions, TimeoutAndOutputCap) {
  auto options = ParseExecOptions({{"cmd", "ls"}, {"timeout_s", 0}, {"max_output_bytes", 0}});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->request.timeout_s, 0);
  EXPECT_EQ(options->max_output_bytes, 0);
  EXPECT_EQ(ExecError({{"cmd", "ls"}, {"timeout_s", 86400}}), "");
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"timeout_s", 86401}}), "timeout_s"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"timeout_s", -1}}), "timeout_s"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"timeout_s", "60"}}), "timeout_s"));
  EXPECT_EQ(ExecError({{"cmd", "ls"}, {"max_output_bytes", 64 * 1024 * 1024}}), "");
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"max_output_bytes", 64 * 1024 * 1024 + 1}}), "max_output_bytes"));
  EXPECT_TRUE(Mentions(ExecError({{"cmd", "ls"}, {"max_output_bytes", -5}}), "max_output_bytes"));
}

TEST(ParseExecOptions, UnknownFieldsAreIgnored) {
  EXPECT_EQ(ExecError({{"cmd", "ls"}, {"pty", {{"cols", 80}}}, {"tag", "x"}}), "");
}

// ---- Other requests

TEST(ParseTimeoutUpdate, RequiresAnIntegerInRange) {
  auto timeout = ParseTimeoutUpdate({{"timeout_s", 600}});
  ASSERT_TRUE(timeout.ok());
  EXPECT_EQ(*timeout, 600);
  EXPECT_TRUE(ParseTimeoutUpdate({{"timeout_s", 0}}).ok());
  EXPECT_FALSE(ParseTimeoutUpdate(json::object()).ok());
  EXPECT_FALSE(ParseTimeoutUpdate({{"timeout_s", nullptr}}).ok());
  EXPECT_FALSE(ParseTimeoutUpdate({{"timeout_s", -1}}).ok());
  EXPECT_FALSE(ParseTimeoutUpdate({{"timeout_s", 2592001}}).ok());
  EXPECT_FALSE(ParseTimeoutUpdate({{"timeout_s", "600"}}).ok());
}

TEST(ParseListFilter, StateAndMetadata) {
  auto filter = ParseListFilter({{"state", "running"}, {"metadata.owner", "ci"}, {"metadata.a.b", ""}, {"x", "y"}});
  ASSERT_TRUE(filter.ok());
  EXPECT_EQ(filter->state, "running");
  EXPECT_EQ(filter->metadata.at("owner"), "ci");
  EXPECT_EQ(filter->metadata.at("a.b"), "");
  EXPECT_EQ(filter->metadata.size(), 2u);
  EXPECT_FALSE(ParseListFilter({{"state", "sleeping"}}).ok());
  EXPECT_FALSE(ParseListFilter({{"metadata.", "v"}}).ok());
  auto none = ParseListFilter({});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->state);
}

TEST(Names, SandboxIdsAreSafeTokens) {
  EXPECT_TRUE(IsValidSandboxId("sb_01HZX3-abc"));
  EXPECT_TRUE(IsValidSandboxId(std::string(128, 'a')));
  EXPECT_FALSE(IsValidSandboxId(""));
  EXPECT_FALSE(IsValidSandboxId(".."));
  EXPECT_FALSE(IsValidSandboxId("a/b"));
  EXPECT_FALSE(IsValidSandboxId("a.b"));
  EXPECT_FALSE(IsValidSandboxId(std::string(129, 'a')));
  EXPECT_FALSE(IsValidSandboxId(std::string("a\0", 2)));
}

}  // namespace
}  // namespace bulkhead::api

// The pieces of `bulkhead mcp` that need no daemon: UTF-8 handling and output caps,
// argument checks against the tools' schemas, JSON-RPC message shapes and line framing.
// The protocol and the tools themselves are tested end to end in tests/integration/test_mcp.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>

#include "mcp/argument_check.h"
#include "mcp/json_rpc.h"
#include "mcp/text.h"
#include "mcp/tool.h"

namespace bulkhead::mcp {
namespace {

TEST(McpText, RecognizesAndRepairsUtf8) {
  EXPECT_TRUE(IsValidUtf8("plain, h\xC3\xA9llo, \xE2\x98\x83, \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));              // cut short
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_EQ(ToValidUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(ToValidUtf8("h\xC3\xA9"), "h\xC3\xA9");
}

TEST(McpText, CutsOnCharacterBoundaries) {
  const std::string text = "a\xE2\x98\x83z";  // a, snowman (3 bytes), z
  EXPECT_EQ(Utf8BoundaryAtOrBefore(text, 2), 1u);
  EXPECT_EQ(Utf8BoundaryAtOrBefore(text, 4), 4u);
  EXPECT_EQ(Utf8BoundaryAtOrBefore(text, 99), text.size());
  EXPECT_EQ(IncompleteUtf8Suffix("a\xE2\x98"), 2u);
  EXPECT_EQ(IncompleteUtf8Suffix("a\xE2\x98\x83"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("abc"), 0u);
}

TEST(McpText, HeadTailBufferKeepsBothEndsAndCountsTheRest) {
  HeadTailBuffer small(100);
  small.Append("hello\n");
  EXPECT_FALSE(small.truncated());
  EXPECT_EQ(small.Render(), "hello\n");

  HeadTailBuffer capped(10);
  for (int i = 0; i < 1000; ++i) capped.Append(std::string(1, static_cast<char>('a' + i % 26)));
  capped.Append("END");
  EXPECT_TRUE(capped.truncated());
  EXPECT_EQ(capped.total_bytes(), 1003u);
  const std::string shown = capped.Render();
  EXPECT_EQ(shown.substr(0, 5), "abcde");
  EXPECT_EQ(shown.substr(shown.size() - 3), "END");
  EXPECT_NE(shown.find("993 bytes omitted"), std::string::npos) << shown;
}

json RunCommandSchema() { return FindTool("run_command")->input_schema; }

TEST(McpArguments, AcceptsWhatTheSchemaAllows) {
  EXPECT_EQ(CheckArguments(RunCommandSchema(), {{"sandbox_id", "s"}, {"command", "ls"}}), std::nullopt);
  EXPECT_EQ(CheckArguments(RunCommandSchema(),
                           {{"sandbox_id", "s"}, {"argv", {"ls", "-l"}}, {"timeout_s", 5.0}, {"env", {{"A", "b"}}}}),
            std::nullopt);
}

TEST(McpArguments, NamesWhatIsWrong) {
  const json schema = RunCommandSchema();
  auto problem = [&schema](json arguments) { return CheckArguments(schema, arguments).value_or("(accepted)"); };
  EXPECT_EQ(problem({{"command", "ls"}}), "missing required argument 'sandbox_id'");
  EXPECT_EQ(problem({{"sandbox_id", 1}}), "'sandbox_id' must be a string, not 1");
  EXPECT_EQ(problem({{"sandbox_id", ""}}), "'sandbox_id' must not be empty");
  EXPECT_EQ(problem({{"sandbox_id", "s"}, {"timeout_s", 0}}), "'timeout_s' must be from 1 to 3600, not 0");
  EXPECT_EQ(problem({{"sandbox_id", "s"}, {"timeout_s", 1.5}}), "'timeout_s' must be an integer, not 1.5");
  EXPECT_EQ(problem({{"sandbox_id", "s"}, {"argv", json::array()}}), "'argv' must have at least 1 item(s)");
  EXPECT_EQ(problem({{"sandbox_id", "s"}, {"argv", {"a", nullptr}}}), "'argv[1]' must be a string, not null");
  EXPECT_EQ(problem({{"sandbox_id", "s"}, {"env", {{"K", 1}}}}), "'env.K' must be a string, not 1");
  EXPECT_EQ(problem({{"sandbox_id", "s"}, {"shell", true}}).substr(0, 26), "unknown argument 'shell'; ");
  const json create = FindTool("create_sandbox")->input_schema;
  EXPECT_EQ(CheckArguments(create, {{"network", "wide"}}).value_or(""),
            "'network' must be one of \"none\", \"allowlist\", \"open\", not \"wide\"");
}

TEST(McpTools, EveryToolIsDescribedForAModel) {
  std::set<std::string> names;
  for (const ToolSpec& tool : AllTools()) {
    EXPECT_TRUE(names.insert(tool.name).second) << tool.name;
    EXPECT_EQ(tool.input_schema["type"], "object") << tool.name;
    EXPECT_EQ(tool.input_schema["additionalProperties"], false) << tool.name;
    EXPECT_EQ(tool.output_schema["type"], "object") << tool.name;
    EXPECT_GT(tool.description.size(), 100u) << tool.name;
    for (const json& required : tool.input_schema.value("required", json::array())) {
      EXPECT_TRUE(tool.input_schema["properties"].contains(required.get<std::string>())) << tool.name;
    }
  }
  EXPECT_EQ(names.size(), 15u);
}

TEST(McpJsonRpc, ClassifiesMessages) {
  auto kind = [](const char* text) { return ClassifyMessage(json::parse(text)).kind; };
  using Kind = IncomingMessage::Kind;
  EXPECT_EQ(kind(R"({"jsonrpc":"2.0","id":1,"method":"ping"})"), Kind::kRequest);
  EXPECT_EQ(kind(R"({"jsonrpc":"2.0","id":"x","method":"ping","params":{}})"), Kind::kRequest);
  EXPECT_EQ(kind(R"({"jsonrpc":"2.0","method":"notifications/initialized"})"), Kind::kNotification);
  EXPECT_EQ(kind(R"({"jsonrpc":"2.0","id":1,"result":{}})"), Kind::kResponse);
  EXPECT_EQ(kind(R"({"jsonrpc":"2.0","id":null,"method":"ping"})"), Kind::kInvalid);
  EXPECT_EQ(kind(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})"), Kind::kInvalid);
  EXPECT_EQ(kind(R"({"jsonrpc":"2.0","id":1,"method":7})"), Kind::kInvalid);
  EXPECT_EQ(kind(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[]})"), Kind::kInvalid);
  EXPECT_EQ(kind(R"({"id":1,"method":"ping"})"), Kind::kInvalid);
  EXPECT_EQ(kind(R"([1])"), Kind::kInvalid);
  // The id of an invalid request is kept when usable, for the error's id.
  EXPECT_EQ(ClassifyMessage(json::parse(R"({"jsonrpc":"1.0","id":9,"method":"ping"})")).id, 9);
}

// Lines arrive byte by byte (spanning many reads) or all at once (many lines in one read).
class McpLineReader : public testing::TestWithParam<bool> {};

TEST_P(McpLineReader, ReadsLinesInPiecesAndSkipsOverlongOnes) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::thread writer([fd = fds[1], byte_by_byte = GetParam()] {
    const std::string input = "one\r\ntw" + std::string("o\n") + std::string(100, 'x') + "\nthree\nlast";
    if (byte_by_byte) {
      for (char c : input) (void)!write(fd, &c, 1);
    } else {
      (void)!write(fd, input.data(), input.size());
    }
    close(fd);
  });
  LineReader reader(fds[0], 50);
  std::string line;
  EXPECT_EQ(reader.Next(line), LineReader::Outcome::kLine);
  EXPECT_EQ(line, "one");
  EXPECT_EQ(reader.Next(line), LineReader::Outcome::kLine);
  EXPECT_EQ(line, "two");
  EXPECT_EQ(reader.Next(line), LineReader::Outcome::kTooLong);
  EXPECT_EQ(reader.Next(line), LineReader::Outcome::kLine);
  EXPECT_EQ(line, "three");
  EXPECT_EQ(reader.Next(line), LineReader::Outcome::kLine);
  EXPECT_EQ(line, "last");
  EXPECT_EQ(reader.Next(line), LineReader::Outcome::kEnd);
  writer.join();
  close(fds[0]);
}

INSTANTIATE_TEST_SUITE_P(Pieces, McpLineReader, testing::Bool());

}  // namespace
}  // namespace bulkhead::mcp

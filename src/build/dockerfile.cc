#include "build/dockerfile.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/clean_path.h"

namespace bulkhead::build {
namespace {

using Lookup = std::function<std::optional<std::string>(const std::string&)>;
using Argv = std::vector<std::string>;

constexpr size_t kMaxDockerfileBytes = 1 << 20;
constexpr unsigned kMaxPortRange = 1000;  // ports one EXPOSE range may name
constexpr size_t kMaxExposedPorts = 1000;  // ports one image exposes
constexpr size_t kMaxPlanBytes = 64 << 20;  // the configs all steps keep, together

// What a step's copy of the config holds, roughly: its strings' bytes.
size_t ConfigBytes(const storage::ImageConfig& config, const std::vector<std::string>& shell) {
  size_t bytes = config.working_dir.size() + config.user.size() + config.os.size() + config.architecture.size();
  for (const auto* list : {&config.env, &config.entrypoint, &config.cmd, &config.exposed_ports, &config.diff_ids, &shell})
    for (const std::string& item : *list) bytes += item.size() + sizeof(std::string);
  for (const auto& [key, value] : config.labels) bytes += key.size() + value.size() + 2 * sizeof(std::string);
  return bytes;
}

const std::set<std::string, std::less<>> kSupported = {
    "FROM", "RUN", "COPY", "ADD", "ENV", "ARG", "WORKDIR", "USER", "LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "SHELL",
    "MAINTAINER"};
// Docker's instructions that bulkhead does not run: refused by name rather than as unknown.
const std::set<std::string, std::less<>> kUnsupported = {"HEALTHCHECK", "ONBUILD", "STOPSIGNAL", "VOLUME"};

Error Invalid(std::string message) {
  return MakeError(ErrorCode::kBadRequest, std::move(message), "dockerfile_invalid");
}
Error LineError(int line, const std::string& message) {
  return Invalid("Dockerfile line " + std::to_string(line) + ": " + message);
}
Error LineError(const Instruction& in, const std::string& message) { return LineError(in.line, message); }
Error BeforeFrom(const Instruction& in) {
  return LineError(in, in.keyword + " comes before the first FROM (only ARG may)");
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool AllDigits(std::string_view s) {
  for (char c : s)
    if (!IsDigit(c)) return false;
  return !s.empty();
}

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view Trim(std::string_view s) {
  s = TrimLeft(s);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}
std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Where the word at the start of `text` ends: at the first space outside quotes and not after
// the escape character. Quotes and escapes stay in the word (ExpandWord takes them off), as
// Docker's parser splits ENV, LABEL, ARG and COPY arguments.
size_t WordEnd(std::string_view text, char escape) {
  char quote = 0;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (c == escape && quote != '\'') {
      i++;  // the next character is part of the word whatever it is
    } else if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (IsSpace(c)) {
      return i;
    }
  }
  return text.size();
}

std::vector<std::string> SplitWords(std::string_view text, char escape) {
  std::vector<std::string> words;
  text = TrimLeft(text);
  while (!text.empty()) {
    const size_t end = WordEnd(text, escape);
    words.emplace_back(text.substr(0, end));
    text = TrimLeft(text.substr(end));
  }
  return words;
}

// Docker's shell-like processing of one word: $NAME and ${NAME...} expanded; quotes and the
// escape character either kept (for a word split still to come) or taken off (the word's value).
// A value substituted is taken as is: its own quotes or spaces mean nothing.
class WordLexer {
 public:
  WordLexer(std::string_view text, char escape, const Lookup& lookup, bool keep_quotes)
      : text_(text), escape_(escape), lookup_(lookup), keep_(keep_quotes) {}

  Result<std::string> Run() { return Until(0); }

 private:
  // Up to `stop` (consumed; 0 = the end of the text).
  Result<std::string> Until(char stop) {
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (stop != 0 && c == stop) {
        pos_++;
        return out;
      }
      Result<std::string> part = std::string();
      if (c == '\'') {
        part = SingleQuoted();
      } else if (c == '"') {
        part = DoubleQuoted();
      } else if (c == '$') {
        part = Dollar();
      } else if (c == escape_) {
        part = Escaped();
      } else {
        out += c;
        pos_++;
        continue;
      }
      if (!part.ok()) return part;
      out += *part;
    }
    if (stop != 0) return Malformed("missing '}'");
    return out;
  }

  // Outside quotes the escape character takes the next character as is; before '$' it is
  // always taken off (the '$' is then literal).
  std::string Escaped() {
    pos_++;
    std::string out;
    if (keep_ && (pos_ == text_.size() || text_[pos_] != '$')) out += escape_;
    if (pos_ < text_.size()) out += text_[pos_++];
    return out;
  }

  Result<std::string> SingleQuoted() {
    const size_t close = text_.find('\'', pos_ + 1);
    if (close == std::string_view::npos) return Malformed("a single quote is not closed");
    std::string inner(text_.substr(pos_ + 1, close - pos_ - 1));
    pos_ = close + 1;
    return keep_ ? "'" + inner + "'" : inner;
  }

  // Inside double quotes variables are expanded and the escape character escapes only '"',
  // '$' and itself (any other is kept, as Docker).
  Result<std::string> DoubleQuoted() {
    std::string out = keep_ ? "\"" : "";
    pos_++;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '"') {
        pos_++;
        if (keep_) out += '"';
        return out;
      }
      if (c == '$') {
        auto value = Dollar();
        if (!value.ok()) return value;
        out += *value;
        continue;
      }
      if (c == escape_ && pos_ + 1 < text_.size()) {
        const char next = text_[pos_ + 1];
        if (next == '"' || next == '$' || next == escape_) {
          if (keep_ && next != '$') out += escape_;
          out += next;
          pos_ += 2;
          continue;
        }
      }
      out += c;
      pos_++;
    }
    return Malformed("a double quote is not closed");
  }

  // A name: letters, digits and '_' (a run of digits alone is a positional name, never set).
  std::string Name() {
    const size_t start = pos_;
    if (pos_ < text_.size() && IsDigit(text_[pos_])) {
      while (pos_ < text_.size() && IsDigit(text_[pos_])) pos_++;
    } else {
      while (pos_ < text_.size() && (IsAlpha(text_[pos_]) || IsDigit(text_[pos_]) || text_[pos_] == '_')) pos_++;
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  Result<std::string> Dollar() {
    pos_++;
    if (pos_ < text_.size() && text_[pos_] == '{') {
      pos_++;
      return Braced();
    }
    const std::string name = Name();
    if (name.empty()) return std::string("$");  // a '$' no name follows is literal
    return lookup_(name).value_or("");
  }

  // After "${": NAME} or NAME followed by :-, -, :+ or + and a word (itself expanded) up to '}'.
  Result<std::string> Braced() {
    // Each "${NAME:-word}" inside a word recurses: a depth no real Dockerfile nears, so a
    // hostile one cannot run the daemon's stack out.
    if (depth_ == kMaxNesting) return Malformed("substitutions nested more than " + std::to_string(kMaxNesting) + " deep");
    depth_++;
    auto braced = BracedInner();
    depth_--;
    return braced;
  }

  Result<std::string> BracedInner() {
    if (pos_ == text_.size()) return Malformed("missing '}'");
    const std::string name = Name();
    if (name.empty()) return Malformed("bad substitution: \"${\" is not followed by a variable name");
    if (pos_ == text_.size()) return Malformed("missing '}'");
    char op = text_[pos_++];
    if (op == '}') return lookup_(name).value_or("");
    const bool colon = op == ':';
    if (colon) {
      if (pos_ == text_.size()) return Malformed("missing '}'");
      op = text_[pos_++];
    }
    if (op != '-' && op != '+')
      return Malformed("${" + name + (colon ? ":" : "") + op +
                       "...} is not supported (only ${NAME:-word}, ${NAME-word}, ${NAME:+word}, ${NAME+word})");
    auto word = Until('}');
    if (!word.ok()) return word;
    const std::optional<std::string> value = lookup_(name);
    // With the colon an empty value counts as unset.
    const bool set = value.has_value() && !(colon && value->empty());
    if (op == '-') return set ? *value : *word;
    return set ? *word : std::string();
  }

  Error Malformed(const std::string& why) const { return Invalid("\"" + std::string(text_) + "\": " + why); }

  static constexpr int kMaxNesting = 32;
  std::string_view text_;
  char escape_;
  const Lookup& lookup_;
  bool keep_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// The word's value: variables expanded, quotes and escapes taken off.
Result<std::string> ExpandWord(std::string_view word, char escape, const Lookup& lookup) {
  return WordLexer(word, escape, lookup, /*keep_quotes=*/false).Run();
}

// ---- Parse ----

// `# name=value` at the top of the file (before any instruction, comment or blank line) for
// the names Docker knows; anything else ends the directives and is a comment.
std::optional<std::pair<std::string, std::string>> ParseDirective(std::string_view line) {
  line = Trim(line);
  if (!line.starts_with('#')) return std::nullopt;
  line = TrimLeft(line.substr(1));
  size_t n = 0;
  while (n < line.size() && (IsAlpha(line[n]) || (n > 0 && IsDigit(line[n])))) n++;
  const std::string name = Lower(line.substr(0, n));
  const std::string_view rest = TrimLeft(line.substr(n));
  if (!rest.starts_with('=')) return std::nullopt;
  const std::string_view value = Trim(rest.substr(1));
  if (value.empty() || (name != "escape" && name != "syntax" && name != "check")) return std::nullopt;
  return std::pair{name, std::string(value)};
}

// Whether `line` ends with the escape character (trailing spaces and tabs allowed): then the
// instruction continues on the next line, and the character is taken off.
bool TakeContinuation(std::string& line, char escape) {
  size_t end = line.size();
  while (end > 0 && (line[end - 1] == ' ' || line[end - 1] == '\t')) end--;
  if (end == 0 || line[end - 1] != escape) return false;
  line.resize(end - 1);
  return true;
}

bool TakesFlag(std::string_view keyword, std::string_view flag) {
  if (keyword == "FROM") return flag == "platform";
  if (keyword == "COPY") return flag == "from" || flag == "chown" || flag == "chmod" || flag == "link";
  if (keyword == "ADD") return flag == "chown" || flag == "chmod" || flag == "link";
  return false;
}
// Flags Docker has that bulkhead does not: refused as "not supported" rather than unknown.
bool DockerOnlyFlag(std::string_view keyword, std::string_view flag) {
  if (keyword == "RUN") return flag == "mount" || flag == "network" || flag == "security";
  if (keyword == "COPY") return flag == "parents" || flag == "exclude";
  if (keyword == "ADD") return flag == "checksum" || flag == "keep-git-dir" || flag == "exclude";
  return false;
}

// A heredoc opener as BuildKit reads one in RUN, COPY and ADD: [n]<<[-]NAME.
bool IsHeredoc(std::string_view word) {
  while (!word.empty() && IsDigit(word.front())) word.remove_prefix(1);
  if (!word.starts_with("<<")) return false;
  word.remove_prefix(2);
  if (word.starts_with('-')) word.remove_prefix(1);
  return !word.empty() && word.find('<') == std::string_view::npos;
}

// One instruction from its joined lines.
Result<Instruction> ParseInstruction(std::string_view text, int line, char escape) {
  text = Trim(text);
  size_t end = 0;
  while (end < text.size() && !IsSpace(text[end])) end++;
  Instruction in;
  in.line = line;
  in.keyword = Upper(text.substr(0, end));
  if (kUnsupported.contains(in.keyword)) return LineError(in, in.keyword + " is not supported");
  if (!kSupported.contains(in.keyword)) return LineError(in, "unknown instruction " + in.keyword);

  std::string_view rest = TrimLeft(text.substr(end));
  std::string flags_text;
  // Flags are the words starting with "--" before the arguments; a lone "--" ends them.
  // A value is kept as written: the evaluation expands it and takes its quotes off.
  while (rest.starts_with("--")) {
    const std::string_view token = rest.substr(0, WordEnd(rest, escape));
    rest = TrimLeft(rest.substr(token.size()));
    flags_text += " ";
    flags_text += token;
    if (token == "--") break;
    const size_t eq = token.find('=');
    const std::string name(token.substr(2, eq == std::string_view::npos ? eq : eq - 2));
    if (!TakesFlag(in.keyword, name)) {
      return LineError(in, DockerOnlyFlag(in.keyword, name) ? in.keyword + " --" + name + " is not supported"
                                                            : in.keyword + " does not take --" + name);
    }
    if (name != "link" && (eq == std::string_view::npos || eq + 1 == token.size()))
      return LineError(in, in.keyword + " --" + name + " needs a value (--" + name + "=...)");
    if (in.flags.contains(name)) return LineError(in, in.keyword + " --" + name + " is given twice");
    in.flags[name] = eq == std::string_view::npos ? "" : std::string(token.substr(eq + 1));
  }
  in.rest = std::string(Trim(rest));
  if (in.rest.empty()) return LineError(in, in.keyword + " has no arguments");
  if ((in.keyword == "RUN" || in.keyword == "COPY" || in.keyword == "ADD") && !in.rest.starts_with('[')) {
    for (const std::string& word : SplitWords(in.rest, escape))
      if (IsHeredoc(word)) return LineError(in, in.keyword + " with a heredoc (" + word + ") is not supported");
  }
  in.original = in.keyword + flags_text + " " + in.rest;
  return in;
}

// ---- Evaluate ----

struct Arg {
  std::string name;
  std::optional<std::string> value;  // unset: declared with no default and no build arg
};

const Arg* FindArg(const std::vector<Arg>& args, std::string_view name) {
  for (const Arg& arg : args)
    if (arg.name == name) return &arg;
  return nullptr;
}
// A later declaration of a name replaces the earlier one in place.
void SetArg(std::vector<Arg>& args, Arg arg) {
  for (Arg& existing : args) {
    if (existing.name == arg.name) {
      existing = std::move(arg);
      return;
    }
  }
  args.push_back(std::move(arg));
}
// An ARG word: NAME or NAME=default.
std::pair<std::string, std::optional<std::string>> SplitArgWord(const std::string& word) {
  const size_t eq = word.find('=');
  if (eq == std::string::npos) return {word, std::nullopt};
  return {word.substr(0, eq), word.substr(eq + 1)};
}

std::optional<std::string> EnvValue(const std::vector<std::string>& env, std::string_view name) {
  for (const std::string& entry : env)
    if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=')
      return entry.substr(name.size() + 1);
  return std::nullopt;
}
// Sets NAME=value, in the place of an earlier NAME if there is one.
void SetEnv(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  for (std::string& entry : env) {
    if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') {
      entry = name + "=" + value;
      return;
    }
  }
  env.push_back(name + "=" + value);
}

std::string UnderWorkingDir(std::string_view path, const std::string& working_dir) {
  if (path.starts_with('/')) return CleanAbsolutePath(path);
  return CleanAbsolutePath((working_dir.empty() ? "/" : working_dir) + "/" + std::string(path));
}

// COPY's destination: a relative one is under the working directory; one that ends in '/'
// (or is ".", "..", or ends in "/." or "/..") names a directory and gets a trailing '/'.
std::string CopyDestination(const std::string& dest, const std::string& working_dir) {
  const bool directory = dest.empty() || dest.ends_with('/') || dest == "." || dest == ".." ||
                         dest.ends_with("/.") || dest.ends_with("/..");
  std::string path = UnderWorkingDir(dest, working_dir);
  if (directory && path != "/") path += '/';
  return path;
}

// scheme://...: ADD would download it.
bool IsUrl(std::string_view source) {
  const size_t colon = source.find("://");
  if (colon == std::string_view::npos || colon == 0 || !IsAlpha(source[0])) return false;
  for (char c : source.substr(0, colon))
    if (!IsAlpha(c) && !IsDigit(c) && c != '+' && c != '-' && c != '.') return false;
  return true;
}

std::optional<unsigned> PortNumber(std::string_view text) {
  if (text.empty() || text.size() > 5 || !AllDigits(text)) return std::nullopt;
  const unsigned port = std::stoul(std::string(text));
  if (port == 0 || port > 65535) return std::nullopt;
  return port;
}

// EXPOSE's "80", "53/udp" or "8000-8002/tcp" as "80/tcp", ...; nullopt when it is none of those.
std::optional<std::vector<std::string>> ExposedPorts(std::string_view spec) {
  std::string protocol = "tcp";
  if (const size_t slash = spec.find('/'); slash != std::string_view::npos) {
    protocol = Lower(spec.substr(slash + 1));
    spec = spec.substr(0, slash);
    if (protocol != "tcp" && protocol != "udp" && protocol != "sctp") return std::nullopt;
  }
  const size_t dash = spec.find('-');
  const std::optional<unsigned> first = PortNumber(spec.substr(0, dash));
  const std::optional<unsigned> last =
      dash == std::string_view::npos ? first : PortNumber(spec.substr(dash + 1));
  if (!first || !last || *last < *first || *last - *first >= kMaxPortRange) return std::nullopt;
  std::vector<std::string> ports;
  for (unsigned port = *first; port <= *last; port++) ports.push_back(std::to_string(port) + "/" + protocol);
  return ports;
}

// COPY --chmod: octal digits, at most 07777.
std::optional<mode_t> OctalMode(std::string_view text) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  mode_t mode = 0;
  for (char c : text) {
    if (c < '0' || c > '7') return std::nullopt;
    mode = mode * 8 + (c - '0');
  }
  if (mode > 07777) return std::nullopt;
  return mode;
}

// The exec form: rest as a JSON array of strings; nullopt when rest is not JSON (the shell
// form). A JSON array holding anything but strings is an error, as in Docker.
Result<std::optional<Argv>> ExecForm(const Instruction& in) {
  if (!in.rest.starts_with('[')) return std::optional<Argv>();
  const nlohmann::json json = nlohmann::json::parse(in.rest, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_array()) return std::optional<Argv>();
  Argv argv;
  for (const auto& item : json) {
    if (!item.is_string()) return LineError(in, in.keyword + ": a JSON array here must hold strings only");
    argv.push_back(item.get<std::string>());
  }
  return std::optional<Argv>(std::move(argv));
}

// FROM [--platform=P] IMAGE [AS NAME]: the image as written, the name lower case.
struct FromLine {
  size_t instruction = 0;
  std::string image;
  std::string name;
};

bool ValidStageName(std::string_view name) {
  if (name.empty() || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || IsDigit(c) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

Result<FromLine> ParseFrom(const Instruction& in, size_t index, char escape) {
  const std::vector<std::string> words = SplitWords(in.rest, escape);
  if (!(words.size() == 1 || (words.size() == 3 && Lower(words[1]) == "as")))
    return LineError(in, "FROM takes an image and an optional stage name: FROM IMAGE [AS NAME]");
  FromLine from{index, words[0], words.size() == 3 ? Lower(words[2]) : ""};
  if (words.size() == 3 && !ValidStageName(from.name))
    return LineError(in, "FROM: \"" + words[2] +
                             "\" is no stage name (a letter, then letters, digits, '-', '_' or '.')");
  return from;
}

// One stage while it is evaluated.
struct StageState {
  Stage stage;  // stage.config is the config so far
  Argv shell;
  std::vector<Arg> args;  // the ARGs declared in the stage so far
  bool cmd_set = false;   // a CMD in this stage: an ENTRYPOINT keeps it
};

std::vector<Arg> PlatformArgs(const storage::Platform& platform) {
  std::string full = platform.os + "/" + platform.architecture;
  if (!platform.variant.empty()) full += "/" + platform.variant;
  std::vector<Arg> args;
  for (const char* side : {"BUILD", "TARGET"}) {
    const std::string prefix = side;
    args.push_back({prefix + "PLATFORM", full});
    args.push_back({prefix + "OS", platform.os});
    args.push_back({prefix + "ARCH", platform.architecture});
    args.push_back({prefix + "VARIANT", platform.variant});
  }
  return args;
}

class Evaluator {
 public:
  Evaluator(const Dockerfile& file, const std::map<std::string, std::string>& build_args,
            const BaseConfig& base_config)
      : file_(file), build_args_(build_args), base_config_(base_config) {}

  Result<BuildPlan> Run(const std::string& target) {
    // Every stage's name first: FROM and COPY --from may name a stage, and naming this one
    // or a later one must be told from naming an image.
    std::vector<FromLine> froms;
    std::set<std::string> declared;  // the names ARGs declare anywhere
    for (size_t i = 0; i < file_.instructions.size(); i++) {
      const Instruction& in = file_.instructions[i];
      if (in.keyword == "FROM") {
        auto from = ParseFrom(in, i, file_.escape);
        if (!from.ok()) return from.error();
        for (const FromLine& earlier : froms) {
          if (!from->name.empty() && earlier.name == from->name)
            return LineError(in, "FROM: the stage name \"" + from->name + "\" is taken (line " +
                                     std::to_string(file_.instructions[earlier.instruction].line) + ")");
        }
        froms.push_back(std::move(*from));
        stage_names_.push_back(froms.back().name);
      } else if (in.keyword == "ARG") {
        for (const std::string& word : SplitWords(in.rest, file_.escape)) declared.insert(SplitArgWord(word).first);
      }
    }
    if (froms.empty()) return Invalid("the Dockerfile has no FROM");
    size_t last = froms.size() - 1;
    if (!target.empty()) {
      size_t i = 0;
      while (i < stage_names_.size() && stage_names_[i] != Lower(target)) i++;
      if (i == stage_names_.size()) return Invalid("the Dockerfile has no stage named \"" + target + "\"");
      last = i;
    }

    // ARGs before the first FROM: the global scope, seen by FROM lines only. The platform ARGs
    // are there from the start, as in BuildKit (a stage declares `ARG TARGETARCH` to use one).
    global_args_ = automatic_;
    for (size_t i = 0; i < froms[0].instruction; i++) {
      const Instruction& in = file_.instructions[i];
      if (in.keyword != "ARG") return BeforeFrom(in);
      BH_TRY(DeclareArgs(in, global_args_, ArgLookup(global_args_), /*global=*/true));
    }

    BuildPlan plan;
    for (size_t s = 0; s <= last; s++) {
      auto stage = EvaluateStage(froms, s, plan);
      if (!stage.ok()) return stage.error();
      plan.stages.push_back(std::move(*stage));
    }
    for (const auto& [name, value] : build_args_)
      if (!declared.contains(name)) plan.unused_build_args.push_back(name);
    return plan;
  }

 private:
  static Lookup ArgLookup(const std::vector<Arg>& args) {
    return [&args](const std::string& name) -> std::optional<std::string> {
      const Arg* arg = FindArg(args, name);
      return arg ? arg->value : std::nullopt;
    };
  }
  // In a stage: the config's env (the base's included), then the ARGs in scope.
  static Lookup StageLookup(const StageState& state) {
    return [&state](const std::string& name) -> std::optional<std::string> {
      if (auto value = EnvValue(state.stage.config.env, name)) return value;
      const Arg* arg = FindArg(state.args, name);
      return arg ? arg->value : std::nullopt;
    };
  }

  Result<std::string> Expand(const Instruction& in, std::string_view word, const Lookup& lookup) const {
    auto expanded = ExpandWord(word, file_.escape, lookup);
    if (!expanded.ok()) return LineError(in, in.keyword + ": " + expanded.error().message);
    return expanded;
  }

  Result<Stage> EvaluateStage(const std::vector<FromLine>& froms, size_t index, const BuildPlan& plan) {
    const FromLine& from = froms[index];
    const Instruction& from_in = file_.instructions[from.instruction];
    const Lookup global = ArgLookup(global_args_);
    StageState state;
    state.stage.name = from.name;
    auto image = Expand(from_in, from.image, global);
    if (!image.ok()) return image.error();
    if (image->empty()) return LineError(from_in, "FROM " + from.image + " names no image");
    state.stage.base = *image;
    if (auto platform = from_in.flags.find("platform"); platform != from_in.flags.end()) {
      auto expanded = Expand(from_in, platform->second, global);
      if (!expanded.ok()) return expanded.error();
      // The host's own platform only: a step runs on this kernel and CPU, nothing emulates.
      if (!expanded->empty()) {
        // (the platform the automatic ARGs hold)
        const std::string os_arch =
            *FindArg(automatic_, "TARGETOS")->value + "/" + *FindArg(automatic_, "TARGETARCH")->value;
        if (*expanded != os_arch && expanded->rfind(os_arch + "/", 0) != 0)
          return LineError(from_in, "FROM --platform=" + *expanded + ": this host builds and runs " + os_arch +
                                        " only (nothing is emulated)");
      }
      state.stage.platform = *expanded;
    }

    // The base: an earlier stage (its config and shell), scratch (nothing), or an image.
    state.shell = {"/bin/sh", "-c"};
    const std::string base_name = Lower(*image);
    size_t earlier = 0;
    while (earlier < index && stage_names_[earlier] != base_name) earlier++;
    if (earlier < index) {
      state.stage.base_stage = static_cast<int>(earlier);
      state.stage.config = plan.stages[earlier].config;
      state.shell = final_shells_[earlier];
    } else if (*image != "scratch") {
      auto cached = base_configs_.find(*image);
      if (cached == base_configs_.end()) {
        auto config = base_config_(*image);
        if (!config.ok()) return config.error();
        cached = base_configs_.emplace(*image, std::move(*config)).first;
      }
      state.stage.config = cached->second;
    }

    const size_t end = index + 1 < froms.size() ? froms[index + 1].instruction : file_.instructions.size();
    for (size_t i = from.instruction + 1; i < end; i++) {
      const Instruction& in = file_.instructions[i];
      Step step;
      step.line = in.line;
      step.original = in.original;
      BH_TRY(EvaluateStep(in, static_cast<int>(index), state, step));
      step.config = state.stage.config;
      step.shell = state.shell;
      // Each step keeps the config as it is then: a hostile file that grows it on every line
      // (ENV, EXPOSE, LABEL) would take memory in the square of its length.
      plan_bytes_ += ConfigBytes(step.config, step.shell);
      if (plan_bytes_ > kMaxPlanBytes)
        return LineError(in, "the image config grows too large over the steps (past " +
                                 std::to_string(kMaxPlanBytes >> 20) + " MiB in all)");
      state.stage.steps.push_back(std::move(step));
    }
    final_shells_.push_back(state.shell);
    return std::move(state.stage);
  }

  // ARG NAME[=default] ...: the build arg given, else the default (expanded with the ARGs
  // before it, the line's own included), else, in a stage, the global ARG's value.
  Status DeclareArgs(const Instruction& in, std::vector<Arg>& args, const Lookup& lookup, bool global) {
    for (const std::string& word : SplitWords(in.rest, file_.escape)) {
      auto [name, default_word] = SplitArgWord(word);
      if (name.empty()) return LineError(in, "ARG \"" + word + "\" names no variable");
      Arg arg{name, std::nullopt};
      if (auto given = build_args_.find(name); given != build_args_.end()) {
        arg.value = given->second;
      } else if (default_word) {
        auto value = Expand(in, *default_word, lookup);
        if (!value.ok()) return value.error();
        arg.value = std::move(*value);
      } else if (const Arg* automatic = FindArg(automatic_, name)) {
        arg.value = automatic->value;
      } else if (const Arg* outer = FindArg(global_args_, name); outer && !global) {
        arg.value = outer->value;
      }
      SetArg(args, std::move(arg));
    }
    return {};
  }

  // ENV and LABEL: NAME=value words (quotes and escapes taken off, variables expanded), or
  // the old form "NAME the rest of the line". All of one line's pairs expand against the state
  // before the line, as in Docker.
  Result<std::vector<std::pair<std::string, std::string>>> Pairs(const Instruction& in, const Lookup& lookup) const {
    std::vector<std::pair<std::string, std::string>> raw;
    const std::vector<std::string> words = SplitWords(in.rest, file_.escape);
    if (words[0].find('=') == std::string::npos) {
      const size_t space = WordEnd(in.rest, file_.escape);
      if (space == in.rest.size()) return LineError(in, in.keyword + " " + in.rest + " has no value (NAME=value)");
      raw.emplace_back(in.rest.substr(0, space), std::string(TrimLeft(std::string_view(in.rest).substr(space))));
    } else {
      for (const std::string& word : words) {
        const size_t eq = word.find('=');
        if (eq == std::string::npos) return LineError(in, in.keyword + ": \"" + word + "\" is no NAME=value");
        raw.emplace_back(word.substr(0, eq), word.substr(eq + 1));
      }
    }
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const auto& [raw_name, raw_value] : raw) {
      auto name = Expand(in, raw_name, lookup);
      if (!name.ok()) return name.error();
      if (name->empty()) return LineError(in, in.keyword + " names an empty key");
      auto value = Expand(in, raw_value, lookup);
      if (!value.ok()) return value.error();
      pairs.emplace_back(std::move(*name), std::move(*value));
    }
    return pairs;
  }

  // RUN, CMD and ENTRYPOINT: the exec form as given, else the shell form (SHELL + [text]).
  Result<Argv> Command(const Instruction& in, const Argv& shell) const {
    auto exec = ExecForm(in);
    if (!exec.ok()) return exec.error();
    if (*exec) return **exec;
    Argv argv = shell;
    argv.push_back(in.rest);
    return argv;
  }

  Status EvaluateStep(const Instruction& in, int index, StageState& state, Step& step) {
    storage::ImageConfig& config = state.stage.config;
    const Lookup lookup = StageLookup(state);
    const std::string& keyword = in.keyword;
    if (keyword == "ARG") return DeclareArgs(in, state.args, lookup, /*global=*/false);
    if (keyword == "ENV" || keyword == "LABEL") {
      auto pairs = Pairs(in, lookup);
      if (!pairs.ok()) return pairs.error();
      for (const auto& [name, value] : *pairs) {
        if (keyword == "ENV") {
          SetEnv(config.env, name, value);
        } else {
          config.labels[name] = value;
        }
      }
      return {};
    }
    if (keyword == "MAINTAINER") {
      config.labels["maintainer"] = in.rest;
      return {};
    }
    if (keyword == "USER" || keyword == "WORKDIR") {
      auto value = Expand(in, in.rest, lookup);
      if (!value.ok()) return value.error();
      if (value->empty()) return LineError(in, keyword + " " + in.rest + " expands to nothing");
      if (keyword == "USER") {
        config.user = *value;
      } else {
        step.kind = Step::Kind::kWorkdir;
        config.working_dir = UnderWorkingDir(*value, config.working_dir);
      }
      return {};
    }
    if (keyword == "EXPOSE") {
      for (const std::string& word : SplitWords(in.rest, file_.escape)) {
        auto spec = Expand(in, word, lookup);
        if (!spec.ok()) return spec.error();
        auto ports = ExposedPorts(*spec);
        if (!ports)
          return LineError(in, "EXPOSE \"" + *spec + "\" is no port (N, N/tcp, N/udp, N/sctp) or range of at most " +
                                   std::to_string(kMaxPortRange) + " ports (N-M)");
        for (std::string& port : *ports) {
          if (std::find(config.exposed_ports.begin(), config.exposed_ports.end(), port) != config.exposed_ports.end())
            continue;
          if (config.exposed_ports.size() == kMaxExposedPorts)
            return LineError(in, "EXPOSE: an image exposes at most " + std::to_string(kMaxExposedPorts) + " ports");
          config.exposed_ports.push_back(std::move(port));
        }
      }
      return {};
    }
    if (keyword == "SHELL") {
      auto exec = ExecForm(in);
      if (!exec.ok()) return exec.error();
      if (!*exec || (*exec)->empty())
        return LineError(in, "SHELL takes a JSON array of strings, e.g. SHELL [\"/bin/bash\", \"-c\"]");
      state.shell = std::move(**exec);
      return {};
    }
    if (keyword == "CMD" || keyword == "ENTRYPOINT") {
      auto argv = Command(in, state.shell);
      if (!argv.ok()) return argv.error();
      if (keyword == "CMD") {
        config.cmd = std::move(*argv);
        state.cmd_set = true;
      } else {
        config.entrypoint = std::move(*argv);
        // Docker: a CMD from the base does not survive a new ENTRYPOINT.
        if (!state.cmd_set) config.cmd.clear();
      }
      return {};
    }
    if (keyword == "RUN") {
      auto argv = Command(in, state.shell);
      if (!argv.ok()) return argv.error();
      if (argv->empty()) return LineError(in, "RUN has an empty command");
      step.kind = Step::Kind::kRun;
      step.argv = std::move(*argv);
      step.run_env = config.env;
      for (const Arg& arg : state.args)
        if (arg.value && !EnvValue(config.env, arg.name)) step.run_env.push_back(arg.name + "=" + *arg.value);
      return {};
    }
    if (keyword == "COPY" || keyword == "ADD") return EvaluateCopy(in, index, state, step);
    return LineError(in, "unknown instruction " + keyword);
  }

  Status EvaluateCopy(const Instruction& in, int index, StageState& state, Step& step) {
    const Lookup lookup = StageLookup(state);
    step.kind = Step::Kind::kCopy;
    step.add = in.keyword == "ADD";
    std::vector<std::string> words;
    auto exec = ExecForm(in);
    if (!exec.ok()) return exec.error();
    if (*exec) {
      // JSON took the quotes off already: expand only.
      for (const std::string& word : **exec) {
        auto expanded = ExpandVariables(word, file_.escape, lookup);
        if (!expanded.ok()) return LineError(in, in.keyword + ": " + expanded.error().message);
        words.push_back(std::move(*expanded));
      }
    } else {
      for (const std::string& word : SplitWords(in.rest, file_.escape)) {
        auto expanded = Expand(in, word, lookup);
        if (!expanded.ok()) return expanded.error();
        words.push_back(std::move(*expanded));
      }
    }
    if (words.size() < 2) return LineError(in, in.keyword + " needs at least one source and a destination");
    step.dest = CopyDestination(words.back(), state.stage.config.working_dir);
    words.pop_back();
    step.sources = std::move(words);
    if (step.add) {
      for (const std::string& source : step.sources)
        if (IsUrl(source))
          return LineError(in, "ADD from a URL is not supported: fetch it with RUN under the build's network policy");
    }

    if (auto flag = in.flags.find("from"); flag != in.flags.end()) {
      auto from = Expand(in, flag->second, lookup);
      if (!from.ok()) return from.error();
      if (from->empty()) return LineError(in, "COPY --from=" + flag->second + " expands to nothing");
      step.from = *from;
      // A number is a stage's index; a stage's name is matched case-insensitively; anything
      // else is an image.
      std::optional<size_t> stage;
      if (AllDigits(*from)) {
        stage = from->size() > 9 ? stage_names_.size() : std::stoul(*from);
      } else {
        for (size_t i = 0; i < stage_names_.size() && !stage; i++)
          if (stage_names_[i] == Lower(*from)) stage = i;
      }
      if (stage && *stage >= static_cast<size_t>(index))
        return LineError(in, "COPY --from=" + *from + " names this stage or a later one: only an earlier stage can be "
                                                      "copied from");
      if (stage) step.from_stage = static_cast<int>(*stage);
    }
    if (auto flag = in.flags.find("chown"); flag != in.flags.end()) {
      auto chown = Expand(in, flag->second, lookup);
      if (!chown.ok()) return chown.error();
      step.chown = std::move(*chown);
    }
    if (auto flag = in.flags.find("chmod"); flag != in.flags.end()) {
      auto chmod = Expand(in, flag->second, lookup);
      if (!chmod.ok()) return chmod.error();
      step.chmod = OctalMode(*chmod);
      if (!step.chmod) return LineError(in, in.keyword + " --chmod=" + *chmod + " is no octal mode (755, 0644)");
    }
    return {};
  }

  const Dockerfile& file_;
  const std::map<std::string, std::string>& build_args_;
  const BaseConfig& base_config_;
  std::vector<std::string> stage_names_;  // every stage of the file, lower case ("" = unnamed)
  std::vector<Arg> global_args_;          // the ARGs before the first FROM
  // BuildKit's platform ARGs, of the host's platform: the build's and the target's alike.
  const std::vector<Arg> automatic_ = PlatformArgs(storage::HostPlatform());
  std::vector<Argv> final_shells_;        // each evaluated stage's SHELL at its end
  size_t plan_bytes_ = 0;                 // ConfigBytes of every step so far
  std::map<std::string, storage::ImageConfig> base_configs_;  // base_config's answers by image
};

}  // namespace

Result<Dockerfile> ParseDockerfile(std::string_view text) {
  if (text.size() > kMaxDockerfileBytes) return Invalid("the Dockerfile is over 1 MiB");
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }

  Dockerfile file;
  bool directives = true;  // still at the top, where parser directives may be
  std::set<std::string> directives_seen;
  bool from_seen = false;
  for (size_t i = 0; i < lines.size(); i++) {
    const int line_no = static_cast<int>(i) + 1;
    if (directives) {
      if (auto directive = ParseDirective(lines[i])) {
        const auto& [name, value] = *directive;
        if (!directives_seen.insert(name).second)
          return LineError(line_no, "only one \"" + name + "\" parser directive can be used");
        if (name == "escape") {
          if (value != "\\" && value != "`") return LineError(line_no, "the escape directive takes '\\' or '`'");
          file.escape = value[0];
        }
        continue;
      }
      directives = false;
    }
    const std::string_view first = TrimLeft(lines[i]);
    if (first.empty() || first.starts_with('#')) continue;
    std::string joined(first);
    bool continues = TakeContinuation(joined, file.escape);
    while (continues) {
      if (++i == lines.size())
        return LineError(line_no, "the instruction continues past the end of the file (the last line ends with '" +
                                      std::string(1, file.escape) + "')");
      // Comment and blank lines inside an instruction are left out of it.
      const std::string_view next = TrimLeft(lines[i]);
      if (next.empty() || next.starts_with('#')) continue;
      std::string part(lines[i]);
      continues = TakeContinuation(part, file.escape);
      joined += part;
    }
    auto instruction = ParseInstruction(joined, line_no, file.escape);
    if (!instruction.ok()) return instruction.error();
    if (!from_seen && instruction->keyword != "ARG" && instruction->keyword != "FROM") return BeforeFrom(*instruction);
    from_seen = from_seen || instruction->keyword == "FROM";
    file.instructions.push_back(std::move(*instruction));
  }
  if (!from_seen) return Invalid("the Dockerfile has no FROM");
  return file;
}

Result<std::string> ExpandVariables(std::string_view word, char escape,
                                    const std::function<std::optional<std::string>(const std::string&)>& lookup) {
  return WordLexer(word, escape, lookup, /*keep_quotes=*/true).Run();
}

Result<BuildPlan> EvaluateDockerfile(const Dockerfile& file, const std::map<std::string, std::string>& build_args,
                                     const std::string& target, const BaseConfig& base_config) {
  return Evaluator(file, build_args, base_config).Run(target);
}

}  // namespace bulkhead::build

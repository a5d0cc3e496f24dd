// Dockerfiles: the parse (continuation lines, comments, parser directives) and the evaluation
// of ARG and ENV into each step's resolved form, stage by stage. Pure logic: the builder
// (builder.h) runs the steps this answers, in sandboxes.
//
// Supported: FROM [--platform=] IMAGE [AS NAME], RUN, COPY [--from= --chown= --chmod= --link],
// ADD [--chown= --chmod=] (local files; a local tarball is extracted), ENV, ARG, WORKDIR, USER,
// LABEL, EXPOSE, CMD, ENTRYPOINT, SHELL, MAINTAINER (a label, as Docker). Any other
// instruction, a flag an instruction does not take, ADD from a URL and heredocs are refused
// by name with the line they are on.
#pragma once
#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "storage/oci_manifest.h"

namespace bulkhead::build {

// One instruction as written: continuation lines joined (the escape character and newline
// removed), comment lines inside it dropped.
struct Instruction {
  int line = 0;                               // 1-based, of its first line
  std::string keyword;                        // upper case: "RUN"
  std::map<std::string, std::string> flags;   // --name=value before the arguments ("link" -> "")
  std::string rest;                           // the text after the keyword and flags, trimmed
  std::string original;                       // keyword, flags and rest as one line, for logs
};

struct Dockerfile {
  char escape = '\\';  // the `# escape=` directive's character
  std::vector<Instruction> instructions;
};

// kBadRequest naming the line for: an unknown or unsupported instruction, a flag it does not
// take, a continuation at the end, a file with no FROM, an instruction before the first FROM
// other than ARG, a heredoc (`<<EOF`), text over 1 MiB.
Result<Dockerfile> ParseDockerfile(std::string_view text);

// Expands $NAME, ${NAME}, ${NAME:-word}, ${NAME:+word}, ${NAME-word}, ${NAME+word} in `word`
// (the escape character before `$` keeps it literal), as Docker does in ENV, ARG, FROM,
// WORKDIR, USER, LABEL, EXPOSE, COPY and ADD. Unset names expand to "". Quotes are kept for
// the caller's word splitting; inside single quotes nothing is expanded.
Result<std::string> ExpandVariables(std::string_view word, char escape,
                                    const std::function<std::optional<std::string>(const std::string&)>& lookup);

// A step whose effect is on the files (the builder runs it) or on the image config only.
struct Step {
  enum class Kind { kRun, kCopy, kWorkdir, kConfig };
  Kind kind = Kind::kConfig;
  int line = 0;
  std::string original;  // the instruction as written, for logs and the cache key
  // kRun: the command (exec form as given; shell form as SHELL + [text]) and the environment
  // it runs with: the config's env, then the ARGs in scope not overridden by an ENV
  // ("NAME=value"). Runs as config.user in config.working_dir.
  std::vector<std::string> argv;
  std::vector<std::string> run_env;
  // kCopy (COPY and ADD): sources relative to the context (or to the --from stage's or image's
  // root), variables expanded; dest expanded, relative ones under the working dir, a trailing
  // '/' kept (it says "a directory").
  std::vector<std::string> sources;
  std::string dest;
  std::string from;                // COPY --from: a stage name or index, or an image; "" = context
  std::optional<int> from_stage;   // the stage index `from` names, if it names one
  std::string chown;               // "user[:group]" as given, expanded; "" = root
  std::optional<mode_t> chmod;     // octal
  bool add = false;                // ADD: a source that is a tar archive is extracted
  // kWorkdir: config.working_dir is created (owned by config.user, as Docker does)
  // The image config after this step (every kind): env, working_dir, user, entrypoint, cmd,
  // exposed_ports, labels. Shell form CMD and ENTRYPOINT are SHELL + [text]; an ENTRYPOINT
  // clears a CMD inherited from the base image.
  storage::ImageConfig config;
  std::vector<std::string> shell;  // after this step
};

struct Stage {
  std::string base;  // FROM's image, expanded (a stage name is resolved into base_stage)
  std::optional<int> base_stage;
  std::string name;  // AS name, lower case; "" if none
  std::string platform;
  std::vector<Step> steps;
  storage::ImageConfig config;  // after the last step (the base's when there is none)
};

struct BuildPlan {
  std::vector<Stage> stages;  // up to and including the target stage
  std::vector<std::string> unused_build_args;  // given but declared by no ARG (Docker warns)
};

// The config of a base image FROM names (not a stage): the builder resolves it (pulling if it
// must). An error stops the evaluation and is answered as is.
using BaseConfig = std::function<Result<storage::ImageConfig>(const std::string& image)>;

// Evaluates `file` with `build_args` (--build-arg NAME=value) up to `target` (a stage name;
// "" = the last stage): ARGs before the first FROM are seen by FROM lines only (a stage
// declares `ARG NAME` to use one); an ARG's value is the build arg given, else its default;
// ENV overrides ARG; WORKDIR is relative to the previous one; SHELL applies to later shell
// forms; exec forms are JSON arrays of strings (otherwise the text is the shell form, as
// Docker). BuildKit's platform ARGs (BUILDPLATFORM, TARGETARCH, ...) hold the host's platform,
// the only one FROM --platform may name. kBadRequest for an unknown target, a COPY --from of a later stage or of itself,
// an empty source list, an invalid EXPOSE, chmod or ENV, naming the line.
Result<BuildPlan> EvaluateDockerfile(const Dockerfile& file, const std::map<std::string, std::string>& build_args,
                                     const std::string& target, const BaseConfig& base_config);

}  // namespace bulkhead::build

// Unpacks a tar stream from a sandbox onto this machine (libarchive), treating the stream
// as hostile: nothing lands outside the destination and nothing is written through a symlink.
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include "cli/tar_stream.h"
#include "common/result.h"

namespace bulkhead::cli {

// Hands out the next piece of the stream, valid until the next call; empty = the end.
using TarChunkSource = std::function<Result<std::string_view>()>;

// Unpacks the tar (plain or compressed) read from `source` under the existing directory
// `directory`, keeping modes (without setuid/setgid), times and symlinks; files belong to
// whoever runs this. Entries with absolute names or ".." components, hard links out of the
// tree and paths through a symlink are refused with an error (what came before stays);
// device nodes are skipped with a warning. Reads the stream one piece at a time.
Status UnpackTar(const TarChunkSource& source, const std::string& directory, const TarWarningHandler& on_warning);

// A name inside the destination: relative, without ".." components.
bool IsContainedTarName(std::string_view name);

}  // namespace bulkhead::cli

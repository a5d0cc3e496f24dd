// Unpacks a tar stream from a sandbox onto this machine (libarchive), treating the stream
// as hostile: nothing lands outside the destination, nothing is written through a symlink,
// and nothing arrives as a setuid program, a device or a file of someone else's.
#pragma once
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/tar_stream.h"
#include "common/result.h"

namespace bulkhead::cli {

// Hands out the next piece of the stream, valid until the next call; empty = the end.
using TarChunkSource = std::function<Result<std::string_view>()>;
using storage::TarWarningHandler;

// Unpacks the tar (plain or compressed) read from `source` under the existing directory
// `directory`, reading the stream one piece at a time. Kept: regular files, directories,
// symlinks that stay inside, hard links to files unpacked before, permission bits (see
// HostPermissions) and times; owners, ACLs and xattrs never are (files belong to whoever
// runs this). Refused: absolute and ".." names, devices, fifos, symlinks leading
// out, other hard links and paths through a symlink (one already at the destination
// included). A refused entry is skipped with a warning and nothing written for it; once
// the rest is unpacked the result is an "unsafe_entry" error.
Status UnpackTar(const TarChunkSource& source, const std::string& directory, const TarWarningHandler& on_warning);

// The permission bits a file from a sandbox gets here: never setuid or setgid, sticky only
// on a directory.
mode_t HostPermissions(mode_t mode, bool is_directory);

// The components of a name inside the destination, without "" and "." (empty: the
// destination itself); nullopt for an absolute name or one with a ".." component.
std::optional<std::vector<std::string_view>> ContainedTarName(std::string_view name);

// Whether a symlink named `name_parts` (as ContainedTarName gives them, not empty) and
// pointing at `target` points inside the destination: `target` is relative, its ".."
// components come before any name (a name could be a symlink whose ".." climbs from
// elsewhere) and climb no higher than the destination.
bool SymlinkStaysInside(const std::vector<std::string_view>& name_parts, std::string_view target);

}  // namespace bulkhead::cli

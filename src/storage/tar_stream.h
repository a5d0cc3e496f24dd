// A directory tree as a tar stream made on the fly (libarchive): the CLI's image import and
// copies out of the local disk, and the daemon's layer of an imported image it pushes.
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include "common/result.h"

#include <archive_entry.h>

namespace bulkhead::storage {

// Takes the next piece of the tar stream.
using TarChunkSink = std::function<Status(std::string_view chunk)>;
// Hears about entries that were skipped or stored imperfectly (sockets, odd names).
using TarWarningHandler = std::function<void(const std::string& warning)>;

// Writes the tree under `root` as a pax tar through `sink`, in pieces of at most 64 KiB,
// never holding more than one piece. Names are "./" and "./path/inside"; owners are kept
// as numeric ids only; modes, times, symlinks (not followed), hard links, xattrs and
// ACLs are kept; other filesystems mounted below `root` appear as empty directories.
// `root` itself may be a symlink to a directory. Stops at the first sink error. `adjust`, if
// given, sees each entry before it is written (owners moved, say). `skip`, if given, is asked
// about each entry by its path relative to root ("a/b") and whether it is a directory: an
// entry it answers true for is left out, a directory with all below it.
Status StreamDirectoryAsTar(const std::string& root, const TarChunkSink& sink, const TarWarningHandler& on_warning,
                            const std::function<void(archive_entry*)>& adjust = {},
                            const std::function<bool(const std::string& path, bool is_dir)>& skip = {});

}  // namespace bulkhead::storage

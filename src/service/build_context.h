// A build's context on the daemon's side: the tar a client sent, unpacked into a directory of
// root's (nothing in it set-id, no device nodes, nothing outside it), less what .dockerignore
// leaves out; and the tars that COPY and ADD unpack in a step's sandbox, made from it. The
// context is the client's: every path in it is resolved inside it (a symlink leads nowhere
// else), and links inside the copied trees are copied as links.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace bulkhead::api {

// Unpacks the tar (plain or compressed) at tar_path into the empty directory `dir`: regular
// files, directories, symlinks and hard links inside it, no set-id bit. 400 for a malformed
// archive or an entry that would land outside `dir`.
Status ExtractContext(const std::string& tar_path, const std::string& dir);

// Unpacks the tar (plain or compressed) at tar_path into the empty directory `dir`, then
// removes what dir/.dockerignore leaves out. Answers the text of the Dockerfile at
// `dockerfile` (relative to the context; read before .dockerignore applies, as Docker sends
// it whatever that says). 400 for a malformed archive or .dockerignore, a missing Dockerfile.
Result<std::string> UnpackContext(const std::string& tar_path, const std::string& dir, const std::string& dockerfile);

// A tar to unpack under `dir` in a sandbox.
struct CopyPart {
  std::string dir;
  std::string tar_path;
  bool extract_archive = false;  // ADD of a local archive: the tar is the source file itself
};

// The tars of `COPY sources dest` from `root` (the context): each source relative to root,
// with wildcards (* ? [..]) expanded; a directory's contents go into dest, a file into dest
// when it names a directory (a trailing '/', or several sources), else to dest itself. Modes
// and times are kept (with `chmod`, every entry gets that mode); owners are left to the
// unpacking. With `add`, a source file that is a tar archive (plain, gzip, bzip2, xz) is
// unpacked into dest instead. Tars are written under work_dir. 400 when a source is missing
// or matches nothing, or several sources go to a dest without '/'.
Result<std::vector<CopyPart>> PlanCopy(const std::string& root, const std::vector<std::string>& sources,
                                       const std::string& dest, std::optional<mode_t> chmod, bool add,
                                       const std::string& work_dir);

// For COPY --from: the tar `archived` (a source as a sandbox archived it: a directory's
// contents, or one file under its name) as the part that puts it at dest (rewritten beside
// it when an entry is renamed or given `chmod`).
Result<CopyPart> PlaceArchived(const std::string& archived, bool source_is_dir, const std::string& source,
                               const std::string& dest, bool several, std::optional<mode_t> chmod);

// The digest of what a tar holds (names, types, modes, owners, sizes, link targets and data;
// not times): what a COPY step's cache key takes from its sources.
Result<std::string> DigestTarContent(const std::string& tar_path);

}  // namespace bulkhead::api

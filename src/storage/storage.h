// Images and per-sandbox writable layers on disk.
//
// Layout under the state dir:
//   images/host/rootfs -> v-<hash>   the host image (a symlink switched atomically on rebuild)
//   images/<name>/rootfs, meta.json  imported images; pulled ones are named by their manifest
//                                    digest's hex, their references kept in meta.json
//   blobs/                           pulled images' blobs, content-addressed (blob_store.h)
// Image and volume files are owned by the stored id range (common/id_ranges.h), never by host
// accounts; every directory here is root's alone (0700) but the trees' own.
//   storage.img, storage/            a loop-mounted filesystem with per-layer hard quotas
//   storage/layers/<id>/{upper,work} writable layers (or layers/<id>/ without quotas)
//   storage/layers/vol-<name>/data   named volumes (sandbox ids never hold a '-')
//   storage/snapshots/<snap_id>/upper snapshots: a layer's upper/ as it was (or snapshots/
//                                    beside layers/ without quotas); btrfs: read-only subvolumes
//   memory/<snap_id>/                a memory snapshot's image, as its tier wrote it
//
// Quotas: XFS project quotas when the kernel has them (like Docker's overlay2 on xfs
// pquota), else btrfs qgroups (one subvolume per layer), else plain dirs without quotas.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "storage/volume_key.h"
#include "storage/image_info.h"
#include "storage/tree_copy.h"

namespace bulkhead::storage {

class LayerArea;  // storage/layer_area.h: how layers are made and limited on one filesystem
class BlobStore;  // storage/blob_store.h

struct WritableLayer {
  std::string upper;  // overlayfs upperdir; holds upper/workspace
  std::string work;   // overlayfs workdir (same filesystem as upper)
};

class Storage {
 public:
  // Opens the storage under state_dir: images/ and the per-sandbox layer area. (blocking)
  // size_gb: size of the loop-mounted quota filesystem when it is first made; 0 = derive.
  // driver: "overlay", "btrfs" or "" (whatever the machine gives), see OpenLayerArea.
  static Result<std::unique_ptr<Storage>> Open(const std::string& state_dir, int64_t size_gb,
                                               const std::string& driver = "");
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The host image: built if missing or stale. Returns its rootfs path (a versioned
  // directory that is never modified once built, safe to hand to a running sandbox).
  // sudo_binary: bulkhead-init, the image's usr/bin/sudo (host_image.h).
  Result<std::string> EnsureHostImage(const std::string& sudo_binary);
  // Host directories bind-mounted read-only into a sandbox of the host image: "/usr" plus
  // any of /bin /sbin /lib /lib32 /lib64 /libx32 that are real directories on this host.
  std::vector<std::string> HostBindDirs() const;

  // Images are stored once, whoever holds them (ImageInfo's `shared` and `tenants`); a tenant
  // ("" for the host in the calls below) sees the host's and its own.
  bool ImageExists(const std::string& name) const;  // held by anyone
  bool ImageVisible(const std::string& name, const std::string& tenant) const;  // tenant may run it
  Result<std::string> ImageRootfs(const std::string& name) const;  // kNotFound if unknown
  // Unpacks a rootfs tarball (any compression libarchive knows). kConflict if the name
  // exists or is "host", kInvalid for a bad name or archive, kDiskFull when out of space.
  // The host's import is named `name`; a tenant's is named by a hash and holds `name` as a
  // reference of that tenant's.
  Result<ImageInfo> ImportImage(const std::string& name, const std::string& tar_path, const std::string& tenant);
  std::vector<ImageInfo> ListImages() const;  // every holder's
  Result<ImageInfo> GetImage(const std::string& name) const;  // kNotFound if unknown
  Status DeleteImage(const std::string& name);  // the caller checks it is unused; "host" -> kConflict

  // ---- pulled images (image_pull.h) ----
  // The stored image that `text` names: a local name ("host", an import, a pulled image's
  // hex), or a registry reference it was pulled as (by tag, or by its manifest's or index's
  // digest). Names without a registry are references on default_registry when not local.
  // kNotFound (image_not_found) if none is here; kInvalid for a malformed reference.
  // For a tenant, its own references come first, then the host's; only images it sees answer.
  Result<std::string> ResolveImage(const std::string& text, const std::string& default_registry,
                                   const std::string& tenant) const;
  BlobStore& blobs() { return *blobs_; }
  // Makes the image of a pull: `unpack` fills its rootfs, then meta.json is written and the
  // tree moved into place at once, held by `tenant`. An image of the same manifest stored
  // already (a pull that raced this one) is answered as it is (NameImage makes it the tenant's).
  Result<ImageInfo> InstallPulledImage(const PulledImage& image, const std::string& tenant,
                                       const std::function<Status(const std::string& rootfs)>& unpack);
  // Makes the image of a build (service/image_build.h): the tree in the tar at tar_path (as the
  // build's sandbox archived its root: owners as the sandbox saw them) under images/<the build
  // key's hex>, with its config; on the host image's directories where `host_base` (a build
  // FROM host). An image of the same build key stored already (a build whose every step was
  // cached) is answered as it is. The caller names it (NameImage).
  Result<ImageInfo> InstallBuiltImage(const BuiltImage& image, const std::string& tar_path, const std::string& tenant);
  // Whether sandboxes of the image get the host image's directories (the host image, and
  // images built FROM it).
  bool ImageUsesHostDirs(const std::string& name) const;
  // Makes `tenant` a holder of image `name` and gives it the reference in the tenant's names
  // (registry/repository:tag, or a local name a build or a tenant's import gave; "" for none),
  // taking it from whichever image of the tenant's had it before (a tag moved by a newer pull).
  Result<ImageInfo> NameImage(const std::string& name, const std::string& reference, const std::string& tenant);
  // Takes a tenant's reference off its image; answers how many references of the tenant's the
  // image has left.
  Result<size_t> UnnameImage(const std::string& name, const std::string& reference, const std::string& tenant);
  // The image that has `reference` among `tenant`'s references (kNotFound if none).
  Result<std::string> OwnReference(const std::string& reference, const std::string& tenant) const;
  // `tenant` holds the image no more (nor its names for it); answers whether anyone still does.
  Result<bool> ReleaseImage(const std::string& name, const std::string& tenant);
  // What a pull stored of image `name` (kNotFound for an image that is no registry's).
  Result<PulledImage> PulledImageOf(const std::string& name) const;
  // The blobs that stored images use: what blob garbage collection keeps. With `seen_by`, only
  // those of the images that tenant sees (what its pulls need not fetch to prove it may).
  std::set<std::string> BlobsInUse(const std::optional<std::string>& seen_by = std::nullopt) const;

  // A sandbox's writable layer: upper/ and work/ for overlayfs, upper/ owned by
  // host_uid:host_gid (the sandbox's root) and containing upper/workspace (0755, same
  // owner). disk_mb is a hard quota when quotas_enforced(). kConflict if it exists.
  Result<WritableLayer> CreateLayer(const std::string& sandbox_id, uid_t host_uid, gid_t host_gid,
                                    int64_t disk_mb);
  // The paths of an existing layer (after a daemon restart). kNotFound if absent.
  Result<WritableLayer> GetLayer(const std::string& sandbox_id) const;
  Status SetLayerQuota(const std::string& sandbox_id, int64_t disk_mb);
  // Bytes the layer holds. With btrfs the figure trails writes by up to one commit (~30 s).
  Result<int64_t> LayerUsageBytes(const std::string& sandbox_id) const;
  Status DestroyLayer(const std::string& sandbox_id);  // removes everything, idempotent
  std::vector<std::string> ListLayers() const;          // sandbox ids with a layer on disk

  // Named volumes (volumes.cc): <layer area>/vol-<name>/data (the host's) or
  // vol-<tenant>+<name>/data (a tenant's: names are each tenant's own), a directory with a
  // hard size_mb cap like a layer's, mode 0755 on disk. Its files are owned by the stored range
  // (common/id_ranges.h; the data dir by kStoredIdBase, which each sandbox sees as its root)
  // and sandboxes mount it idmapped from there. vol-... is 0700.
  // Returns the data directory. kConflict if it exists.
  Result<std::string> CreateVolume(const VolumeKey& key, int64_t size_mb);
  Result<std::string> VolumeDir(const VolumeKey& key) const;  // kNotFound if absent
  Result<int64_t> VolumeUsageBytes(const VolumeKey& key) const;
  Status DestroyVolume(const VolumeKey& key);  // idempotent
  std::vector<VolumeKey> ListVolumes() const;  // the volumes on disk

  // ---- snapshots ----
  // Captures sandbox_id's layer as snapshot snapshot_id. The caller keeps the layer still
  // (freezes the sandbox) meanwhile. kConflict if the snapshot exists.
  Status CaptureSnapshot(const std::string& sandbox_id, const std::string& snapshot_id);
  // A new writable layer for sandbox_id whose upper/ starts as a copy of the snapshot's, its
  // owners moved by `owners` (from the snapshot's sandbox's range to the new one; owners.to
  // is the new sandbox's root); work/ fresh. Copy-on-write where the driver can.
  Result<WritableLayer> CreateLayerFromSnapshot(const std::string& sandbox_id, const std::string& snapshot_id,
                                                const IdShift& owners, int64_t disk_mb);
  Status DestroySnapshot(const std::string& snapshot_id);  // removes its files, idempotent
  std::vector<std::string> ListSnapshots() const;          // snapshot ids with files on disk
  // The directory of a snapshot: it holds upper/ (the sandbox's files, owners in the range
  // of the uid_base recorded with it). Never modified once captured.
  std::string SnapshotDir(const std::string& snapshot_id) const;
  // For an imported snapshot: an empty SnapshotDir to unpack upper/ into, then sealed once
  // complete (immutable from then on, like a captured one).
  Status MakeSnapshotDir(const std::string& snapshot_id);
  Status SealSnapshot(const std::string& snapshot_id);
  Result<int64_t> SnapshotSizeBytes(const std::string& snapshot_id) const;  // files and memory
  // A memory snapshot's image (Tier::Checkpoint): a directory of root's alone beside the
  // files, removed with them by DestroySnapshot. MakeMemoryDir makes it empty (kConflict if it
  // exists) and answers its path.
  Result<std::string> MakeMemoryDir(const std::string& snapshot_id);
  std::string MemoryDir(const std::string& snapshot_id) const;
  // "overlay" (file copies, reflinked where the filesystem can) or "btrfs" (subvolume snapshots).
  std::string driver() const;

  bool quotas_enforced() const;
  // "xfs-prjquota", "btrfs-qgroup" or "none": for logs and /metrics.
  std::string quota_backend() const;
  const std::string& state_dir() const { return state_dir_; }

 private:
  Storage(std::string state_dir, std::unique_ptr<LayerArea> layers, std::unique_ptr<BlobStore> blobs);
  // An image's directory made under a temporary name, filled, given meta.json and renamed
  // into place, so a crash leaves no half-made image (Open removes the leftovers).
  // existing_ok: a directory of that name already there is the answer, not kConflict.
  Result<ImageInfo> InstallImage(const std::string& name, const std::function<Status(const std::string& rootfs)>& fill,
                                 const std::function<nlohmann::json(ImageInfo&)>& meta, bool existing_ok);
  Status WriteImageMeta(const std::string& name, const nlohmann::json& meta);
  // A stored image's meta.json, by its directory's name; 404 image_not_found for no such image.
  Result<nlohmann::json> ImageMeta(const std::string& name) const;
  std::string ImagesDir() const;
  std::string HostImageDir() const;
  std::string LayerDir(const std::string& sandbox_id) const;
  static Result<std::string> VolumeLayerId(const VolumeKey& key);
  std::string MemoryRoot() const;

  std::string state_dir_;
  std::unique_ptr<LayerArea> layers_;
  std::unique_ptr<BlobStore> blobs_;
  std::vector<std::string> host_bind_dirs_;
  mutable std::mutex images_mu_;  // serializes host image builds, image imports/deletes and meta.json writes
};

}  // namespace bulkhead::storage

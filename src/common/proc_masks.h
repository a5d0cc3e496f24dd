// The kernel-facing /proc files a sandbox does not get, in every tier: the native tier masks
// and binds them when it mounts /proc (runtime/native/contain.cc), init does it itself where the
// tier's runtime made /proc (init/self_contain.h), as Docker does.
#pragma once
#include <string_view>

namespace bulkhead {

// Hidden: files behind /dev/null, directories behind an empty read-only tmpfs.
inline constexpr std::string_view kMaskedProcPaths[] = {
    "/proc/kcore",         "/proc/keys",        "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
    "/proc/timer_stats",   "/proc/acpi",        "/proc/scsi",       "/proc/asound"};
// Kernel tunables: visible, read-only.
inline constexpr std::string_view kReadOnlyProcPaths[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq",
                                                          "/proc/bus", "/proc/fs"};

}  // namespace bulkhead

// clone(2) for children that share the daemon's memory until they exec or exit.
#pragma once

// glibc's clone under its other exported name (one function, GLIBC_2.2.5); not in its headers.
extern "C" int __clone(int (*fn)(void*), void* stack, int flags, void* arg, ...);

namespace bulkhead::runtime {

// ThreadSanitizer intercepts `clone` and takes every call for a fork: it runs its fork-child
// bookkeeping in the child, which with CLONE_VM writes the daemon's own state, so the daemon
// believes itself a forked child and dies at its next thread start. Calling glibc by its
// other name skips the interceptor; the children run uninstrumented code until they exec.
inline int CloneSharingMemory(int (*fn)(void*), void* stack, int flags, void* arg) {
  return ::__clone(fn, stack, flags, arg);
}

}  // namespace bulkhead::runtime

// clone(2) for children that share the daemon's memory until they exec or exit.
#pragma once
#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstddef>

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

// Runs fn(arg) in a child that borrows this thread's memory (flags hold CLONE_VM|CLONE_VFORK)
// on a stack of its own, and returns once it has exec'd or exited: its pid, or -1 with errno.
// Signals stay blocked meanwhile (a handler would run on memory the child is using); the
// child resets them.
inline int CloneOnBorrowedMemory(int (*fn)(void*), int flags, void* arg, size_t stack_bytes) {
  void* stack = ::mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const int pid = CloneSharingMemory(fn, static_cast<char*>(stack) + stack_bytes, flags, arg);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, stack_bytes);  // (CLONE_VFORK: the child no longer runs on it)
  errno = clone_errno;
  return pid;
}

}  // namespace bulkhead::runtime

// The sudo socket: how the `sudo` program in a sandbox (sudo_client.cc, the bulkhead-init
// binary run as "sudo") asks init (sudo_server.cc) to run a command as another user.
//
// A SOCK_SEQPACKET unix socket at kSudoSocketPath, there only when the sandbox's spec names
// sudo users (ctl::kSudoUsers, which the daemon sends init). Every message is one packet holding a JSON object.
//
// client -> init
//   first   {"argv": [..], "cwd": "/home/user", "user": "root", "mode": "command"|"shell"|"login",
//            "preserve_env": false, "env": ["K=V", ..]}
//           with SCM_RIGHTS: the client's stdin, stdout and stderr, in that order. "env" is
//           the client's environment (TERM and, with "preserve_env", everything is taken from it).
//   then    {"signal": 15}  a signal the client received, for the command's process group
// init -> client
//   last    {"exit_code": 0} | {"signal": 9} | {"error": "a line to print"}
// The client's uid is the SCM_CREDENTIALS the kernel attaches to its request (the socket has
// SO_PASSCRED), never anything it writes. init kills the
// command's process group when the connection closes before the command ended.
#pragma once
#include <cstddef>

namespace bulkhead::init {

inline constexpr char kSudoSocketDir[] = "/run/bulkhead-init";
inline constexpr char kSudoSocketPath[] = "/run/bulkhead-init/sudo.sock";
// A request beyond this (argv and env together) is refused; packets are read whole.
inline constexpr size_t kSudoMaxRequestBytes = 128 * 1024;

// bulkhead-init started under this name is the sudo client.
int SudoClientMain(int argc, char** argv);

}  // namespace bulkhead::init

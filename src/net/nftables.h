// Running nft programs through libnftables, in the calling thread's network namespace.
#pragma once
#include <string>

#include "common/result.h"

namespace bulkhead::net {

// Runs `program` (nft syntax, any number of commands) as one transaction in the network
// namespace of the calling thread; answers nft's output (for list commands). `where` names
// the namespace in errors ("sandbox network namespace"). Serialized process-wide: libnftables
// keeps global state (interface cache, one-time gmp/xtables setup) that concurrent contexts
// would race on.
Result<std::string> RunNft(const std::string& program, const std::string& where);

}  // namespace bulkhead::net

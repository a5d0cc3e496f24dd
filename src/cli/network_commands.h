// The commands for a sandbox's egress: network (show or change the policy) and egress (the log).
#pragma once
#include "cli/session.h"

namespace bulkhead::cli {

// `bulkhead network ID` prints the policy; `bulkhead network ID MODE [--allow E]...` changes it.
int NetworkCommand(Session& session);
// `bulkhead egress ID [--limit N] [--json]`: TIME PROTO VERDICT DESTINATION OUT IN REASON.
int EgressCommand(Session& session);

}  // namespace bulkhead::cli

// The commands for tenants and their keys (tenant create|ls|rm, key create|ls|revoke), over
// /v1/tenants and /v1/keys.
#pragma once
#include "cli/session.h"

namespace bulkhead::cli {

int TenantCreateCommand(Session& session);  // prints the name
int TenantListCommand(Session& session);    // NAME SANDBOXES SNAPSHOTS CREATED
int TenantRemoveCommand(Session& session);  // prints each name removed; goes on past a failure
int TenantShowCommand(Session& session);    // RESOURCE USED QUOTA
int TenantQuotaCommand(Session& session);   // PATCHes the quotas; prints as show does
// `bulkhead tenant egress NAME [--mode M [--allow X]...] [--deny Y]... | --clear`: replaces
// the tenant's egress rules; prints as show does.
int TenantEgressCommand(Session& session);
int KeyCreateCommand(Session& session);     // prints the key (shown this once)
int KeyListCommand(Session& session);       // ID TENANT SCOPE NAME CREATED EXPIRES REVOKED
int KeyRevokeCommand(Session& session);     // prints each id revoked; goes on past a failure

}  // namespace bulkhead::cli

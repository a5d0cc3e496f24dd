// What init receives, in ctl_messages.h's types (one decoder, shared with the daemon's encoder).
#pragma once
#include "common/ctl_messages.h"

namespace bulkhead::init {

using ExecRequest = ctl::ExecMessage;
using PtySize = ctl::PtySize;

}  // namespace bulkhead::init

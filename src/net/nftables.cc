#include "net/nftables.h"

#include <nftables/libnftables.h>

#include <memory>
#include <mutex>

namespace bulkhead::net {
namespace {

std::mutex nftables_mutex;

using NftContext = std::unique_ptr<nft_ctx, decltype(&::nft_ctx_free)>;

}  // namespace

Result<std::string> RunNft(const std::string& program, const std::string& where) {
  std::lock_guard lock(nftables_mutex);
  // The context opens its netlink socket here: in the calling thread's namespace.
  NftContext ctx(::nft_ctx_new(NFT_CTX_DEFAULT), &::nft_ctx_free);
  if (!ctx) return MakeError(ErrorCode::kInternal, "nftables: cannot create a context");
  ::nft_ctx_buffer_output(ctx.get());  // keep the daemon's stdout and stderr clean
  ::nft_ctx_buffer_error(ctx.get());
  if (::nft_run_cmd_from_buffer(ctx.get(), program.c_str()) == 0) {
    return std::string(::nft_ctx_get_output_buffer(ctx.get()));
  }
  std::string message = ::nft_ctx_get_error_buffer(ctx.get());
  while (!message.empty() && message.back() == '\n') message.pop_back();
  if (message.empty()) message = "failed";
  return MakeError(ErrorCode::kInternal, "nftables in " + where + ": " + message);
}

}  // namespace bulkhead::net

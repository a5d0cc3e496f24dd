// Runs a blocking call (SandboxManager work marked "(blocking)") on the blocking thread
// pool and resumes the awaiting coroutine on its own executor (its connection's strand),
// so io threads never block on mounts, clone or SQLite.
#pragma once
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {

// co_await RunBlocking(pool, [&] { return manager.Create(spec); }) returns what the function
// returns. An exception thrown by it is rethrown in the coroutine.
template <typename Function>
boost::asio::awaitable<std::invoke_result_t<Function&>> RunBlocking(boost::asio::thread_pool& pool,
                                                                    Function function) {
  namespace asio = boost::asio;
  using Value = std::invoke_result_t<Function&>;
  constexpr bool kVoid = std::is_void_v<Value>;
  // Filled on a pool thread; read after the coroutine resumes. The handoff through the
  // executors' queues orders the accesses. The coroutine frame (and so these locals)
  // outlives the pool task because the coroutine is suspended until the handler runs.
  std::optional<std::conditional_t<kVoid, bool, Value>> result;
  std::exception_ptr failure;
  co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
      [&](auto handler) {
        asio::post(pool, [&, handler = std::move(handler)]() mutable {
          try {
            if constexpr (kVoid) {
              function();
              result.emplace(true);
            } else {
              result.emplace(function());
            }
          } catch (...) {
            failure = std::current_exception();
          }
          auto executor = asio::get_associated_executor(handler);
          asio::dispatch(executor, std::move(handler));
        });
      },
      asio::use_awaitable);
  if (failure) std::rethrow_exception(failure);
  if constexpr (!kVoid) co_return std::move(*result);
}

}  // namespace bulkhead::api

#pragma GCC diagnostic pop

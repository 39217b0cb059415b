// Routing: a pure function from an HTTP request (and the server's state) to either a
// response or a job for the worker pool, and from a finished job to its response.
// doctest calls these directly, without sockets. A request's tenant is read off its own
// header (the token it shows), so a job is always its sender's.
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <functional>
#include <boost/beast/http.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "anonymous_connections.hpp"
#include "event_log.hpp"
#include "execute_job.hpp"
#include "inflight_bytes.hpp"
#include "response_body.hpp"
#include "kcoral/blob_store.hpp"
#include "kcoral/execute.hpp"
#include "metrics.hpp"
#include "request_body.hpp"
#include "server_config.hpp"
#include "tenants.hpp"
#include "worker_pool.hpp"

namespace kcoral {

using HttpRequest = boost::beast::http::request<RequestBody>;
using HttpResponse = boost::beast::http::response<ResponseBodyType>;

// The in-flight budget of each tenant (--max-inflight-bytes-per-tenant; 0: all of
// --max-inflight-bytes for a server of one tenant, else half of it and at least
// --max-request-bytes), by tenant.
[[nodiscard]] std::uint64_t tenant_inflight_limit(const ServerConfig& config, std::size_t tenants);
// The connections one tenant may hold: --max-connections-per-tenant, else all of them with
// one tenant and half with more.
[[nodiscard]] std::size_t tenant_connection_limit(const ServerConfig& config, std::size_t tenants);
[[nodiscard]] std::vector<std::unique_ptr<InflightBytes>> tenant_budgets(const ServerConfig& config,
                                                                         std::size_t tenants);

// What the router reads and updates; owned by the Server.
struct ServerState {
  const ServerConfig& config;
  BlobStore& blobs;
  WorkerPool& pool;
  Metrics& metrics;
  std::string instance_id;
  std::string started_at;  // RFC 3339, UTC
  std::size_t gpu_count = 0;
  std::string target_arch;  // "sm_90a" on a GPU server; empty on a CPU one
  const Tenants tenants{};  // --token-file's; without one, a single tenant and no token
  std::atomic<bool> stopping{false};
  std::atomic<int> responses_pending{0};  // accepted programs whose answer is not yet written
  std::uint64_t descriptor_limit = 0;
  EventLog* event_log = nullptr;             // --log-dir; null: none
  EventLog* anonymous_log = nullptr;         // --log-dir with --token-file: records without a token
  std::atomic<std::size_t> connections{0};  // HttpSessions alive
  // Each tenant's connections, from the first request that showed its token, by tenant.
  std::vector<std::atomic<std::size_t>> tenant_connections = std::vector<std::atomic<std::size_t>>(tenants.size());
  InflightBytes inflight{config.max_inflight_bytes};
  // Each tenant's part of `inflight`, by tenant.
  std::vector<std::unique_ptr<InflightBytes>> tenant_inflight = tenant_budgets(config, tenants.size());
  // With tokens: the connections that have shown none yet.
  AnonymousConnections anonymous{config.max_anonymous_connections != 0 ? config.max_anonymous_connections
                                                                        : std::max<std::size_t>(1, config.max_connections / 4),
                                 config.max_anonymous_per_address};
  ExecuteSettings execute{config.default_timeout_seconds, config.max_timeout_seconds,
                          config.default_output_limit_bytes, config.max_output_limit_bytes,
                          config.max_response_bytes};
  // Where a request's steps that may take long run (admission_takes_long,
  // answer_takes_long), never on the I/O threads; null: where they are asked for.
  boost::asio::thread_pool* long_steps = nullptr;
};

struct RouteResult {
  std::optional<HttpResponse> response;  // answer now, or
  std::shared_ptr<ExecuteJob> job;       // run this and answer with finish_execute, or
  std::move_only_function<RouteResult()> rest = {};  // run this long step for one of the two
};

// What a request holds beyond its body, in the budget its body is held in: the bytes the
// blob store makes for its program (BlobStore::resolve), and what parsing its program part
// takes (parse_execute_request), what the parsed program keeps of it then.
struct RequestHolds {
  BlobStore::CopyBudget copies;
  ParseBudget parse;
};

// `request`'s body is emptied by POST /execute, whose blobs are kept where they arrived
// (parse_execute_request). `client`: the peer's address, for the event log.
[[nodiscard]] RouteResult route(HttpRequest& request, ServerState& state, std::string_view client = {},
                                const RequestHolds& holds = {});

// What one POST /execute came to: counted in the metrics and, with --log-dir, written to
// the event log. Every /execute is recorded once, whether answered by the router, by its
// program, or refused by the session on its header or body. An anonymous record goes to
// the anonymous log (none without one), never to the event log.
struct ExecuteRecord {
  std::string_view request_id;
  std::string_view client;
  int http_status = 0;
  std::optional<ResponseStatus> status;  // the body's; none: no answer was sent (abandoned)
  std::string_view outcome;  // the metrics label when not the status's (abandoned)
  std::optional<ErrorKind> error_kind;
  std::string_view error_message;
  const Program* program = nullptr;  // when it was parsed
  ResponseTimings timings{};
  double seconds = 0;  // arrival to answer
  std::uint64_t request_bytes = 0;
  std::uint64_t response_bytes = 0;
  // Whose request it was; none: it showed no accepted token on a server that needs one
  // (an anonymous record). Never none for what the router answers: a request reaches it
  // only once its header passed check_access.
  std::optional<std::size_t> tenant = 0;
  // Why its reused worker takes no more programs, as the worker said (JobOutcome).
  std::string_view worker_retired = {};
  // It ran a second time, on a worker of CUDA's default queues (ExecuteJob::ran_again).
  bool ran_again = false;
};
void record_execute(ServerState& state, const ExecuteRecord& record);
// A worker start that failed, for the event log: a line of its own, with `"event":
// "worker_start_failed"` and no request id. `gpu`: the UUID of its group's GPU, or a set
// group's UUIDs joined by commas (empty on a CPU server); `failures_in_row`: its group's,
// this one included.
struct StartFailureRecord {
  std::string_view gpu;
  long pid = 0;
  std::string_view message;
  bool timed_out = false;
  std::size_t failures_in_row = 0;
};
void record_start_failure(EventLog* log, const StartFailureRecord& record);
// With --token-file, every request but GET /health must carry one of its tokens as
// `Authorization: Bearer <token>`: unauthorized otherwise. Checked on the header alone,
// before any body is read.
[[nodiscard]] std::optional<Error> check_access(const boost::beast::http::request_header<>& header,
                                                const ServerState& state);
// The tenant whose token the header carries (`Authorization: Bearer <token>`, compared in
// constant time); on a server without tokens, its one tenant whatever the header says.
[[nodiscard]] std::optional<std::size_t> tenant_of(const boost::beast::http::request_header<>& header,
                                                   const ServerState& state);
// Steps of a request whose time grows with what its client or its worker sent, which the
// session hands to ServerState::long_steps: admitting a body from kLongStepBytes
// (execute_job.hpp; its multipart scan, the wait for its parts' hashes, its blobs'
// copies); the rest of an admission that loads that much from the disk cache (hashed
// again: a quarter of a second for 256 MiB) or copies it (RouteResult::rest); encoding an
// answer whose text is that large (its returned values, its output).
[[nodiscard]] bool admission_takes_long(const HttpRequest& request);
[[nodiscard]] bool answer_takes_long(const JobOutcome& outcome);
[[nodiscard]] HttpResponse finish_execute(const ExecuteJob& job, JobOutcome outcome,
                                          ServerState& state, unsigned http_version, bool keep_alive);
// An error response outside a program (malformed HTTP, too large, …).
[[nodiscard]] HttpResponse error_response(const Error& error, unsigned http_version, bool keep_alive,
                                          const std::string& request_id = {});

}  // namespace kcoral

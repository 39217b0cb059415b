// Routing of GET /health, GET /metrics and POST /execute.
#include "router.hpp"

#include <algorithm>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "descriptors.hpp"
#include "kcoral/request_id.hpp"
#include "kcoral/version.hpp"

namespace kcoral {
namespace {

namespace http = boost::beast::http;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// `encoded` is taken by value: a program's answer (up to --max-response-bytes) is moved
// into the response, not copied.
HttpResponse make_response(EncodedResponse encoded, const std::string& request_id,
                           unsigned version, bool keep_alive) {
  HttpResponse response{static_cast<http::status>(encoded.http_status), version};
  response.set(http::field::server, "kcoral-server");
  response.set(http::field::content_type, encoded.content_type);
  if (!request_id.empty()) response.set("X-Request-ID", request_id);
  if (encoded.http_status == 503) response.set(http::field::retry_after, "1");
  if (encoded.http_status == 401) response.set(http::field::www_authenticate, "Bearer realm=\"kcoral\"");
  response.body() = std::move(encoded.body);
  response.keep_alive(keep_alive);
  response.prepare_payload();
  return response;
}

std::string request_id_of(const HttpRequest& request) {
  auto [first, last] = request.equal_range("X-Request-ID");
  if (first != last && std::next(first) == last) {
    std::string value(first->value().data(), first->value().size());
    if (is_canonical_request_id(value)) return value;
  }
  return new_request_id();
}

// The label an /execute response is counted under in the metrics.
std::string_view outcome_label(int http_status, std::optional<ResponseStatus> body_status) {
  switch (http_status) {
    case 200:
      return body_status == ResponseStatus::completed ? "completed"
             : body_status == ResponseStatus::failed  ? "failed"
                                                      : "cache_miss";
    case 400: return "rejected";
    case 401: return "unauthorized";
    case 408: return "slow_client";
    case 413: return "too_large";
    case 503: return "busy";
    case 504: return "timeout";
    default: return "error";
  }
}

FrontGauges front_gauges(const ServerState& state) {
  return {state.connections.load(),
          state.config.max_connections,
          state.inflight.used(),
          state.inflight.limit(),
          open_descriptors(),
          state.descriptor_limit,
          state.config.max_queued_per_tenant,
          tenant_inflight_limit(state.config, state.tenants.size())};
}

std::vector<TenantGauges> tenant_gauges(const ServerState& state) {
  std::vector<WorkerPool::TenantLoad> load = state.pool.tenant_load();
  std::vector<TenantGauges> gauges;
  for (std::size_t tenant = 0; tenant < state.tenants.size(); ++tenant) {
    const std::string& name = state.tenants.name(tenant);
    BlobStore::Usage cached = state.blobs.usage(state.tenants.key(tenant));
    WorkerPool::TenantLoad queue = tenant < load.size() ? load[tenant] : WorkerPool::TenantLoad{};
    gauges.push_back({name, queue.running, queue.waiting, state.tenant_inflight.at(tenant)->used(), cached.bytes,
                      cached.blobs});
  }
  return gauges;
}

HttpResponse health(const HttpRequest& request, ServerState& state, const std::string& request_id) {
  WorkerPool::Load load = state.pool.load();
  Json versions = Json::object();
  for (const auto& [name, version] : state.pool.versions()) versions[name] = version;
  versions["kcoral"] = std::string(kcoral::version());  // the server's own, from git tags
  Json body{{"status", state.stopping ? "unavailable" : "ok"},
            {"instance_id", state.instance_id},
            {"started_at", state.started_at},
            {"gpu_count", state.gpu_count},
            {"load", {{"request_capacity", load.capacity},
                      {"requests_in_progress", load.running},
                      {"requests_waiting", load.waiting},
                      {"gpus_in_progress", load.gpus_running},
                      {"gpus_waiting", load.gpus_waiting}}},
            {"target", state.target_arch.empty() ? Json::object() : Json{{"arch", state.target_arch}}},
            {"versions", std::move(versions)}};
  return make_response({state.stopping ? 503 : 200, "application/json", body.dump()}, request_id,
                       request.version(), request.keep_alive() && !state.stopping);
}

// What an /execute's answer and records need of its request once its body is parsed.
struct ExecuteRequestInfo {
  std::string request_id;
  std::string client;
  std::optional<std::size_t> tenant;  // none only for a request refused for it
  Clock::time_point received;
  std::uint64_t request_bytes = 0;  // admission keeps the blobs, empties the body
  unsigned version = 11;
  bool keep_alive = false;
};

RouteResult answer_now(const ExecuteRequestInfo& info, ServerState& state, const EncodedResponse& encoded,
                       ResponseStatus status, const Error* error, const Program* program) {
  record_execute(state, {info.request_id, info.client, encoded.http_status, status, {},
                         error ? std::optional(error->kind) : std::nullopt, error ? error->message : "", program, {},
                         std::chrono::duration<double>(Clock::now() - info.received).count(), info.request_bytes,
                         encoded.body.size(), info.tenant});
  return RouteResult{make_response(encoded, info.request_id, info.version, info.keep_alive && !state.stopping),
                     nullptr};
}

// A worker holds each memory file of its program's blobs open, within its descriptor limit
// (`open_files`, less what it needs itself): a program whose blobs are in more of them
// would kill every worker it is handed to. Blobs sent in one request share its memfd; each
// one read back from the disk cache, or copied, has one of its own.
std::optional<Error> check_memory_files(const AdmittedRequest& admitted, std::uint64_t open_files) {
  const std::uint64_t own = std::min<std::uint64_t>(128, open_files / 2);  // its interpreter's, its program's
  std::unordered_set<int> files;
  for (const auto& [digest, blob] : admitted.blobs) files.insert(blob.fd());
  const std::uint64_t most = open_files - own;
  if (files.size() <= most) return std::nullopt;
  return Error{ErrorKind::request_too_large,
               "the program's " + std::to_string(admitted.blobs.size()) + " blobs are in " +
                   std::to_string(files.size()) + " memory files (each blob read back from the server's disk "
                   "cache has one of its own), more than a worker may hold (" + std::to_string(most) +
                   ": --open-files-limit less " + std::to_string(own) +
                   " for its own use); send their bytes again in one request, where they share one, or name fewer"};
}

// The parsed request's blobs resolved: the job to run, or the answer to give now.
RouteResult admit(ExecuteRequestInfo info, ServerState& state, ExecuteRequest parsed,
                  const BlobStore::CopyBudget& copies) {
  auto admitted = admit_parsed(info.request_id, std::move(parsed), state.blobs, state.tenants.key(*info.tenant),
                               state.execute, copies);
  if (auto* now = std::get_if<ExecuteAnswer>(&admitted))
    return answer_now(info, state, now->response, now->status, now->error ? &*now->error : nullptr,
                      now->program ? &*now->program : nullptr);
  auto job = std::make_shared<ExecuteJob>();
  job->admitted = std::move(std::get<AdmittedRequest>(admitted));
  if (auto refused = check_memory_files(job->admitted, state.config.sandbox_policy.open_files))
    return answer_now(info, state, encode_error(info.request_id, *refused), ResponseStatus::error, &*refused,
                      &job->admitted.program);
  if (auto sealed = job->seal_program_text(); !sealed) {
    Error busy{ErrorKind::busy, "the server could not hold this program's text now (" + sealed.error().message +
                                    "); retry later"};
    return answer_now(info, state, encode_error(info.request_id, busy), ResponseStatus::error, &busy,
                      &job->admitted.program);
  }
  job->request_id = std::move(info.request_id);
  job->tenant = *info.tenant;
  job->client = std::move(info.client);
  job->request_bytes = info.request_bytes;
  job->received = info.received;
  job->answer_held.emplace(state.inflight);
  job->answer_held->set_tenant(state.tenant_inflight.at(job->tenant).get());
  return {std::nullopt, std::move(job)};
}

RouteResult execute(HttpRequest& request, ServerState& state, std::string request_id, std::string_view client,
                    const RequestHolds& holds) {
  // The session let the request through on its token, so it has a tenant; should it not,
  // nothing runs (and no blob is stored) without one.
  ExecuteRequestInfo info{std::move(request_id), std::string(client), tenant_of(request, state), Clock::now(),
                          request.body().bytes.size(), request.version(), request.keep_alive()};
  auto refuse = [&](const Error& error) {
    return answer_now(info, state, encode_error(info.request_id, error), ResponseStatus::error, &error, nullptr);
  };
  if (!info.tenant) return refuse(*check_access(request, state));
  if (state.stopping) return refuse({ErrorKind::busy, "the server is shutting down"});
  auto content_type = request[http::field::content_type];
  auto parsed =
      parse_execute_request({content_type.data(), content_type.size()}, request.body().settled(), {}, holds.parse);
  if (!parsed) return refuse(parsed.error());
  // Blobs loaded from the disk or copied for this program: the rest of its admission takes
  // as long as they are large, or, from the disk, many.
  auto to_make = state.blobs.to_make(state.tenants.key(*info.tenant), parsed->program, parsed->blobs);
  if (to_make.bytes >= kLongStepBytes || to_make.blobs >= kLongStepBlobs)
    return {std::nullopt, nullptr,
            [info = std::move(info), &state, parsed = std::move(*parsed), copies = holds.copies]() mutable {
              return admit(std::move(info), state, std::move(parsed), copies);
            }};
  return admit(std::move(info), state, std::move(*parsed), holds.copies);
}

}  // namespace

RouteResult route(HttpRequest& request, ServerState& state, std::string_view client, const RequestHolds& holds) {
  std::string_view target(request.target().data(), request.target().size());
  target = target.substr(0, target.find('?'));
  unsigned version = request.version();
  bool keep_alive = request.keep_alive() && !state.stopping;
  std::string request_id = request_id_of(request);
  auto method_not_allowed = [&](std::string_view allowed) {
    HttpResponse response = error_response(
        {ErrorKind::method_not_allowed, std::string(target) + " accepts " + std::string(allowed) + " only"},
        version, keep_alive, request_id);
    response.set(http::field::allow, std::string(allowed));
    return RouteResult{std::move(response), nullptr};
  };
  if (target == "/execute") {
    if (request.method() != http::verb::post) return method_not_allowed("POST");
    return execute(request, state, std::move(request_id), client, holds);
  }
  state.metrics.record_other_request();
  if (target == "/health") {
    if (request.method() != http::verb::get) return method_not_allowed("GET");
    return {health(request, state, request_id), nullptr};
  }
  if (target == "/metrics") {
    if (request.method() != http::verb::get) return method_not_allowed("GET");
    return {make_response({200, "text/plain; version=0.0.4; charset=utf-8",
                           state.metrics.render(state.pool.load(), state.blobs, front_gauges(state),
                                                tenant_gauges(state), state.pool.start_counts())},
                          request_id, version, keep_alive),
            nullptr};
  }
  return {error_response({ErrorKind::not_found, "no endpoint " + std::string(target) +
                                                    " (POST /execute, GET /health, GET /metrics)"},
                         version, keep_alive, request_id),
          nullptr};
}

bool admission_takes_long(const HttpRequest& request) {
  // A body whose parts are still being hashed is settled there too, whatever its size.
  return request.body().bytes.size() >= kLongStepBytes || request.body().hashing != nullptr;
}

bool answer_takes_long(const JobOutcome& outcome) {
  if (!outcome.result) return false;
  const ProgramResult& result = *outcome.result;
  return result.results_json.size() + result.stdout_output.text.size() + result.stderr_output.text.size() >=
         kLongStepBytes;
}

HttpResponse finish_execute(const ExecuteJob& job, JobOutcome outcome, ServerState& state,
                            unsigned http_version, bool keep_alive) {
  // The error, for the record, before the outcome is handed on.
  std::optional<ErrorKind> error_kind;
  std::string error_message;
  if (!outcome.result) {
    error_kind = outcome.result.error().kind;
    error_message = outcome.result.error().message;
  } else if (outcome.result->error) {
    error_kind = outcome.result->error->kind;
    error_message = outcome.result->error->message;
  }
  if (!outcome.worker_retired.empty()) state.metrics.record_worker_retired(outcome.worker_retired);
  if (job.answer_refused) state.metrics.record(Metrics::Guard::answer_refused);
  ExecuteAnswer answer = answer_execute(job.request_id, std::move(outcome.result), outcome.timings, state.execute,
                                        outcome.gpu_ids);
  if (answer.status == ResponseStatus::error && answer.error) {  // it may have become response_too_large
    error_kind = answer.error->kind;
    error_message = answer.error->message;
  }
  record_execute(state, {job.request_id, job.client, answer.response.http_status, answer.status, {}, error_kind,
                         error_message, &job.admitted.program, outcome.timings,
                         std::chrono::duration<double>(Clock::now() - job.received).count(), job.request_bytes,
                         answer.response.body.size(), job.tenant, outcome.worker_retired, job.ran_again});
  return make_response(std::move(answer.response), job.request_id, http_version, keep_alive);
}

void record_execute(ServerState& state, const ExecuteRecord& record) {
  std::string_view label = record.outcome.empty() ? outcome_label(record.http_status, record.status) : record.outcome;
  state.metrics.record_execute(label, record.seconds, record.tenant, record.timings.queue_ms);
  EventLog* log = record.tenant ? state.event_log : state.anonymous_log;
  if (log == nullptr) return;
  // The operator's name for the tenant, never its token.
  Json line{{"time", now_rfc3339()},
            {"request_id", record.request_id},
            {"client", record.client},
            {"tenant", record.tenant ? Json(state.tenants.name(*record.tenant)) : Json(nullptr)},
            {"outcome", label},
            {"http_status", record.http_status},
            {"status", record.status ? to_wire(*record.status) : ""}};
  line["error"] = record.error_kind ? Json{{"kind", to_wire(*record.error_kind)},
                                           {"message", std::string(record.error_message.substr(0, 300))}}
                                    : Json(nullptr);
  if (record.program != nullptr) {
    Json ops = Json::object();
    for (const Instruction& instruction : record.program->instructions()) {
      std::string op(op_name(instruction));
      ops[op] = ops.value(op, 0) + 1;
    }
    line["program"] = {{"instructions", record.program->instructions().size()},
                       {"ops", std::move(ops)},
                       {"blobs", record.program->blobs().size()},
                       {"timeout_seconds", record.program->options().timeout_seconds
                                               ? Json(*record.program->options().timeout_seconds)
                                               : Json(nullptr)}};
  } else {
    line["program"] = nullptr;
  }
  line["timings"] = {{"seconds", record.seconds},
                     {"queue_ms", record.timings.queue_ms},
                     {"elapsed_ms", record.timings.elapsed_ms},
                     {"lease_wait_ms", record.timings.lease_wait_ms},
                     {"lease_held_ms", record.timings.lease_held_ms}};
  line["request_bytes"] = record.request_bytes;
  line["response_bytes"] = record.response_bytes;
  if (!record.worker_retired.empty()) line["worker_retired"] = std::string(record.worker_retired.substr(0, 300));
  // Its first run's benchmark() found a call's work on several streams of a one-queue worker.
  if (record.ran_again) line["ran_again"] = "multi_stream";
  // ASCII only: U+2028, U+2029 and U+0085 end a line for some readers (JavaScript's, and
  // Python's splitlines), so a client's text must not bring them in raw. Invalid UTF-8
  // becomes U+FFFD.
  log->write(line.dump(-1, ' ', true, Json::error_handler_t::replace));
}

void record_start_failure(EventLog* log, const StartFailureRecord& record) {
  if (log == nullptr) return;
  Json line{{"time", now_rfc3339()},
            {"event", "worker_start_failed"},
            {"outcome", record.timed_out ? "timed_out" : "failed"},
            {"gpu", record.gpu.empty() ? Json(nullptr) : Json(record.gpu)},
            {"worker_pid", record.pid},
            {"failures_in_row", record.failures_in_row},
            {"message", std::string(record.message.substr(0, 2000))}};
  log->write(line.dump(-1, ' ', true, Json::error_handler_t::replace));
}

std::optional<std::size_t> tenant_of(const http::request_header<>& header, const ServerState& state) {
  if (!state.tenants.need_tokens()) return 0;
  auto [first, last] = header.equal_range(http::field::authorization);
  if (first == last || std::next(first) != last) return std::nullopt;
  std::string_view value(first->value().data(), first->value().size());
  constexpr std::string_view kScheme = "Bearer ";
  if (value.size() <= kScheme.size() ||
      !boost::beast::iequals(boost::beast::string_view(value.data(), kScheme.size()),
                             boost::beast::string_view(kScheme.data(), kScheme.size())))
    return std::nullopt;
  return state.tenants.find(value.substr(kScheme.size()));
}

std::optional<Error> check_access(const http::request_header<>& header, const ServerState& state) {
  if (!state.tenants.need_tokens()) return std::nullopt;
  std::string_view target(header.target().data(), header.target().size());
  target = target.substr(0, target.find('?'));
  if (target == "/health" && header.method() == http::verb::get) return std::nullopt;
  if (tenant_of(header, state)) return std::nullopt;
  bool sent = header.find(http::field::authorization) != header.end();
  return Error{ErrorKind::unauthorized,
               sent ? "the bearer token is not one this server accepts (send `Authorization: Bearer <token>`)"
                    : "this server needs a bearer token: send `Authorization: Bearer <token>` (kcoral.Client takes "
                      "token= or the KCORAL_TOKEN environment variable)"};
}

std::uint64_t tenant_inflight_limit(const ServerConfig& config, std::size_t tenants) {
  if (config.max_inflight_bytes_per_tenant != 0) return config.max_inflight_bytes_per_tenant;
  if (tenants <= 1) return config.max_inflight_bytes;
  return std::min(config.max_inflight_bytes, std::max(config.max_request_bytes, config.max_inflight_bytes / 2));
}

std::size_t tenant_connection_limit(const ServerConfig& config, std::size_t tenants) {
  if (config.max_connections_per_tenant != 0) return config.max_connections_per_tenant;
  return tenants <= 1 ? config.max_connections : std::max<std::size_t>(1, config.max_connections / 2);
}

std::vector<std::unique_ptr<InflightBytes>> tenant_budgets(const ServerConfig& config, std::size_t tenants) {
  std::vector<std::unique_ptr<InflightBytes>> budgets;
  for (std::size_t tenant = 0; tenant < tenants; ++tenant)
    budgets.push_back(std::make_unique<InflightBytes>(tenant_inflight_limit(config, tenants)));
  return budgets;
}

HttpResponse error_response(const Error& error, unsigned http_version, bool keep_alive,
                            const std::string& request_id) {
  std::string id = request_id.empty() ? new_request_id() : request_id;
  return make_response(encode_error(id, error), id, http_version, keep_alive);
}

}  // namespace kcoral

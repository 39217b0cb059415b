// A ServerState for routing tests: an unstarted WorkerPool (load() and versions() work
// without workers), a small blob store, fresh metrics, the tenants given (one, without
// tokens, by default), and helpers to make requests.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "kcoral/codec.hpp"
#include "kcoral/sha256.hpp"
#include "router.hpp"

namespace kcoral::test {

namespace http = boost::beast::http;
using Json = nlohmann::ordered_json;

struct ServerFixture {
  // `disk`: the blob store's disk cache, if any.
  explicit ServerFixture(Tenants tenants_given = {}, DiskBlobCache* disk = nullptr)
      : tenants(std::move(tenants_given)), blobs({1 << 20}, disk) {}

  static WorkerPool::Config pool_config(std::size_t tenants) {
    WorkerPool::Config config;
    config.tenants = tenants;
    return config;
  }

  ServerConfig config;
  Tenants tenants;
  BlobStore blobs;
  boost::asio::io_context io;
  WorkerPool pool{io, pool_config(tenants.size())};  // never started: no processes
  Metrics metrics{tenants.size()};
  // The fields after tenants keep their defaults; which fields those are grows with the
  // server, so they are left out rather than spelled out here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
  ServerState state{config, blobs, pool, metrics, "instance-1", "2026-12-02T15:51:55.123456Z", 0, "", tenants};
#pragma GCC diagnostic pop

  RouteResult get(const std::string& target, const std::string& token = {}) {
    HttpRequest request{http::verb::get, target, 11};
    if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
    return route(request, state);
  }

  // POST /execute with the given parts (name, content type, data), showing `token` if any.
  RouteResult execute(const std::vector<OutgoingPart>& parts, const std::string& request_id = {},
                      const std::string& token = {}) {
    EncodedMultipart body = encode_multipart(parts);
    HttpRequest request{http::verb::post, "/execute", 11};
    request.set(http::field::content_type, body.content_type);
    if (!request_id.empty()) request.set("X-Request-ID", request_id);
    if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
    // As a session hands it on: the bytes, and the digests of its parts as they came.
    request.body().bytes = body.body;
    request.body().digests = MultipartDigests(body.content_type);
    request.body().digests.advance(request.body().bytes.view());
    request.prepare_payload();
    return route(request, state);
  }
};

inline Json body_of(const HttpResponse& response) { return Json::parse(response.body().joined()); }

inline std::string header(const HttpResponse& response, std::string_view name) {
  auto it = response.find(boost::beast::string_view(name.data(), name.size()));
  return it == response.end() ? std::string() : std::string(it->value());
}

// A program uploading each of `datas` as bytes and returning the first.
inline std::string program_with_bytes(const std::vector<std::string>& datas, const std::string& options = {}) {
  std::string instructions;
  for (std::size_t i = 0; i < datas.size(); ++i) {
    if (i > 0) instructions += ",";
    instructions += R"({"op":"upload","id":"b)" + std::to_string(i) + R"(","kind":"bytes","blob":")" +
                    sha256_hex(datas[i]) + "\"}";
  }
  std::string program = R"({"instructions":[)" + instructions + "]";
  if (!options.empty()) program += R"(,"options":)" + options;
  return program + "}";
}

}  // namespace kcoral::test

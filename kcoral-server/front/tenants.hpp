// Tenants: who shares this server, as the operator names them in --token-file.
//
// A tenant is a name with one token or more. Each line of the token file is either a bare
// token, or a name and a token separated by spaces or tabs:
//
//   alice  PfA0eE4wfGkq9vYu8yXW3Q
//   bob    zj9bXk0Jq3u5oFpvG1mR7w
//   Ljq3N5mVb6KkX1sYwq8e2A              <- named tenant-3, by its line
//
// Lines of one name are one tenant's tokens (for rotation); a bare token is named by its
// line number, so a file of bare tokens (the format before names) still works, each token
// a tenant of its own. Names are 1 to 64 letters, digits, '.', '_' or '-', so that they
// need no escaping in a metrics label or a log line; tenant-<number> is a bare token's
// only. What a tenant keeps across restarts (its blobs on disk) is kept under its key: a
// named tenant's name, a bare token's tenant the digest of its token, never its line, so
// that a token's line moved or removed never gives its blobs to another. A token holds
// no space or tab (RFC 6750's bearer tokens never do). Only SHA-256 digests of the tokens are kept, and no
// message here ever shows a token. A server without tokens has one tenant, "default", whom every
// request is. The tenants are fixed at start; index i of every per-tenant table is the
// tenant i here. Immutable after construction, so thread-safe.
//
//   auto tenants = Tenants::read_token_file("/etc/kcoral/tokens");
//   if (auto tenant = tenants->find("PfA0eE4wfGkq9vYu8yXW3Q")) use(tenants->name(*tenant));
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral {

class Tenants {
 public:
  // One tenant, "default", and no token: a server without --token-file.
  Tenants();

  // The tenants of a token file (see above); fails on a malformed line, naming its number.
  [[nodiscard]] static Result<Tenants> read_token_file(const std::string& path);
  // The same from the file's text; `source` names it in messages.
  [[nodiscard]] static Result<Tenants> parse(std::string_view text, std::string_view source);

  // Whether requests must show a token (there was a token file).
  [[nodiscard]] bool need_tokens() const { return !tokens_.empty(); }
  // The tenant whose token this is; compared in constant time with every token known, so
  // how far a guess matches stays hidden. Always the one tenant without tokens.
  [[nodiscard]] std::optional<std::size_t> find(std::string_view token) const;

  [[nodiscard]] std::size_t size() const { return names_.size(); }
  [[nodiscard]] const std::string& name(std::size_t tenant) const { return names_.at(tenant); }
  [[nodiscard]] const std::vector<std::string>& names() const { return names_; }
  // What the tenant's blobs are kept under (see above); unlike a name, never shown.
  [[nodiscard]] const std::string& key(std::size_t tenant) const { return keys_.at(tenant); }

 private:
  struct Token {
    std::string digest;  // SHA-256 of the token, hex
    std::size_t tenant;
  };
  Tenants(std::vector<std::string> names, std::vector<std::string> keys, std::vector<Token> tokens)
      : names_(std::move(names)), keys_(std::move(keys)), tokens_(std::move(tokens)) {}

  std::vector<std::string> names_;
  std::vector<std::string> keys_;
  std::vector<Token> tokens_;
};

}  // namespace kcoral

// Tenants: reading the token file, and finding a token's tenant.
#include "tenants.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "kcoral/sha256.hpp"

namespace kcoral {
namespace {

constexpr std::string_view kBlank = " \t\r";
constexpr std::size_t kMaxNameBytes = 64;

std::string_view trimmed(std::string_view text) {
  std::size_t first = text.find_first_not_of(kBlank);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kBlank) - first + 1);
}

bool is_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameBytes && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

constexpr std::string_view kBareTokenName = "tenant-";

// A bare token's name, which no line may give a tenant of its own: that tenant would be
// shown as the bare token's is, and be taken for it.
bool is_bare_token_name(std::string_view name) {
  return name.starts_with(kBareTokenName) && name.size() > kBareTokenName.size() &&
         std::all_of(name.begin() + kBareTokenName.size(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Tenants::Tenants() : names_{"default"}, keys_{"default"} {}

Result<Tenants> Tenants::read_token_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return fail(ErrorKind::engine, "cannot read the token file " + path);
  std::ostringstream text;
  text << file.rdbuf();
  return parse(text.str(), "the token file " + path);
}

Result<Tenants> Tenants::parse(std::string_view text, std::string_view source) {
  std::vector<std::string> names;
  std::vector<std::string> keys;
  std::vector<Token> tokens;
  std::size_t number = 0;
  while (!text.empty()) {
    std::size_t end = text.find('\n');
    std::string_view line = trimmed(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++number;
    if (line.empty()) continue;
    auto at_line = [&](const std::string& what) {
      return fail(ErrorKind::engine, std::string(source) + ", line " + std::to_string(number) + ": " + what);
    };
    std::string name = std::string(kBareTokenName) + std::to_string(number);
    std::string_view token = line;
    bool named = false;
    if (std::size_t gap = line.find_first_of(" \t"); gap != std::string_view::npos) {
      if (!is_name(line.substr(0, gap)))
        return at_line("a line is a token, or a name and a token; the name may hold only letters, digits, '.', '_' "
                       "and '-' (at most 64)");
      name = std::string(line.substr(0, gap));
      token = trimmed(line.substr(gap));
      if (token.find_first_of(" \t") != std::string_view::npos)
        return at_line("a line is a token, or a name and a token, separated by spaces; this one holds more");
      if (is_bare_token_name(name))
        return at_line("the name " + name + " is a bare token's (the tenant of a line without a name); name the "
                       "tenant otherwise");
      named = true;
    }
    std::string digest = sha256_hex(token);
    std::size_t tenant = std::find(names.begin(), names.end(), name) - names.begin();
    if (tenant == names.size()) {
      names.push_back(name);
      // A ':' that no name holds: a bare token's key is never a named tenant's.
      keys.push_back(named ? name : "token:" + digest);
    }
    auto known = std::find_if(tokens.begin(), tokens.end(), [&](const Token& t) { return t.digest == digest; });
    if (known != tokens.end() && known->tenant != tenant)
      return at_line("this token is also " + names[known->tenant] + "'s; a token names one tenant");
    if (known == tokens.end()) tokens.push_back({std::move(digest), tenant});
  }
  if (tokens.empty()) return fail(ErrorKind::engine, std::string(source) + " holds no token");
  return Tenants(std::move(names), std::move(keys), std::move(tokens));
}

std::optional<std::size_t> Tenants::find(std::string_view token) const {
  if (tokens_.empty()) return 0;
  // Digests of equal length, every one compared: how far a guess matches stays hidden.
  std::string digest = sha256_hex(token);
  std::optional<std::size_t> found;
  for (const Token& known : tokens_)
    if (CRYPTO_memcmp(known.digest.data(), digest.data(), digest.size()) == 0) found = known.tenant;
  return found;
}

}  // namespace kcoral

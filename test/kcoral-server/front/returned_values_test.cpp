// check_returned_values: what a worker may splice into a response, judged on texts as an
// honest worker writes them and as a hostile one could (megabyte numbers and strings,
// nesting a million deep). The check must not recurse: a stack overflow here crashes the
// suite, which is the failure these cases would show.
#include <doctest/doctest.h>

#include <string>

#include "returned_values.hpp"

using kcoral::check_returned_values;
using kcoral::ErrorKind;

namespace {

bool passes(const std::string& text, std::size_t parts = 0) { return check_returned_values(text, parts).has_value(); }

// Containers nested `depth` levels inside the results object's field "k".
std::string nested(std::size_t depth) {
  return R"({"k":)" + std::string(depth, '[') + std::string(depth, ']') + "}";
}

}  // namespace

TEST_CASE("returned values as the worker's encoder writes them pass") {
  CHECK(passes("{}"));
  CHECK(passes(" \t\r\n{ } \n"));
  CHECK(passes(R"({"out":{"type":"integer","value":42},"s":{"type":"string","value":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t"}})"));
  CHECK(passes(R"({"a":{"type":"array","value":[{"type":"null"},{"type":"boolean","value":true},{"type":"boolean","value":false}]}})"));
  CHECK(passes(R"({"n":[0,-0,1.5,-2.25e-300,1E+10,3e5,0.000001]})"));
  CHECK(passes("{\"raw\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\"}"));  // UTF-8 as written, unescaped
  CHECK(passes(R"({"b":{"type":"bytes","part":"return:0","sha256":"x"},"t":{"type":"tensor","part":"return:1"}})", 2));
  // A "part" key spelled with an escape is still the client's "part".
  CHECK(passes(R"({"b":{"type":"bytes","p\u0061rt":"return:0"}})", 1));
  // "part" fields that are not strings are values like any other.
  CHECK(passes(R"({"part":{"type":"object","value":{"part":{"type":"integer","value":1}}}})"));
}

TEST_CASE("numbers and strings of any length pass, in one pass") {
  const std::string megabyte(1 << 20, '7');
  CHECK(passes(R"({"big":)" + megabyte + "}"));
  CHECK(passes(R"({"big":-)" + megabyte + "}"));
  CHECK(passes(R"({"frac":0.)" + megabyte + "e-" + megabyte + "}"));
  CHECK(passes(R"({"s":")" + std::string(4 << 20, 'x') + "\"}"));
  std::string escapes;
  for (int i = 0; i < (1 << 18); ++i) escapes += "\\u00e9\\n";
  CHECK(passes(R"({"s":")" + escapes + "\"}"));
  // Malformed at their far end.
  CHECK_FALSE(passes(R"({"big":)" + megabyte + "x}"));
  CHECK_FALSE(passes(R"({"big":)" + megabyte + ".}"));
  CHECK_FALSE(passes(R"({"s":")" + std::string(4 << 20, 'x') + "}"));
}

TEST_CASE("text that is not one strict JSON object is refused as a broken worker's (engine)") {
  for (std::string text :
       {std::string(""), std::string("   "), std::string("[]"), std::string("1"), std::string("\"s\""),
        std::string("{"), std::string("}"), std::string("{} {}"), std::string(R"({},"status":"COMPLETED")"),
        std::string(R"({"a":1,})"), std::string(R"({"a" 1})"), std::string(R"({"a":})"), std::string(R"({a:1})"),
        std::string(R"({"a":[1,]})"), std::string(R"({"a":[,1]})"), std::string(R"({"a":[1 2]})"),
        std::string(R"({"a":[1}})"), std::string(R"({"a":{]})"), std::string(R"({"a":tru})"),
        std::string(R"({"a":truex})"), std::string(R"({"a":nul})"), std::string(R"({"a":01})"),
        std::string(R"({"a":-})"), std::string(R"({"a":1.})"), std::string(R"({"a":.5})"), std::string(R"({"a":1e})"),
        std::string(R"({"a":1e+})"), std::string(R"({"a":+1})"), std::string(R"({"a":0x10})"),
        std::string(R"({"a":NaN})"), std::string(R"({"a":Infinity})"), std::string(R"({"a":'s'})"),
        std::string(R"({"on\s":0})"), std::string("{\"a\":4\v}"), std::string("{\"a\":\"\t\"}"),
        std::string("{\"a\":\"\x01\"}"), std::string(R"({"a":"\u12"})"), std::string(R"({"a":"\u12G4"})"),
        std::string(R"({"a":"\ud800"})"), std::string(R"({"a":"\udc00"})"), std::string(R"({"a":"\ud800\u0041"})"),
        std::string(R"({"a":"\ud800x"})"), std::string("{\"a\":\"\xff\"}"), std::string("{\"a\":\"\xc3\"}"),
        std::string("{\"a\":1}\0", 8), std::string(R"({"a":"\)")}) {
    CAPTURE(text);
    auto checked = check_returned_values(text, 0);
    REQUIRE_FALSE(checked.has_value());
    CHECK(checked.error().error.kind == ErrorKind::engine);
  }
}

TEST_CASE("binary nodes name each part exactly once") {
  CHECK_FALSE(passes(R"({"b":{"part":"return:1"}})", 1));
  CHECK_FALSE(passes(R"({"b":{"part":"return:0"},"c":{"part":"return:0"}})", 1));
  CHECK_FALSE(passes(R"({"b":{"part":"return:+0"}})", 1));
  CHECK_FALSE(passes(R"({"b":{"part":"return:00x"}})", 1));
  CHECK_FALSE(passes(R"({"b":{"part":"other:0"}})", 1));
  CHECK_FALSE(passes(R"({"b":{"part":"return:0)" + std::string(100, '0') + "\"}}", 1));
  CHECK_FALSE(passes("{}", 1));
  auto checked = check_returned_values(R"({"b":{"part":"return:7"}})", 1);
  REQUIRE_FALSE(checked.has_value());
  CHECK(checked.error().error.message == "a result whose returned values name a part wrongly: 'return:7'");
}

TEST_CASE("nesting past the protocol's depth is a serialization refusal naming the return") {
  CHECK(passes(nested(kcoral::kMaxReturnedJsonDepth - 1)));  // with the results object: the limit
  for (std::string text : {nested(kcoral::kMaxReturnedJsonDepth), nested(1000000),
                           [] {  // the typed tree's own shape
                             std::string deep = R"({"k":)";
                             for (int i = 0; i < 200000; ++i) deep += R"({"type":"array","value":[)";
                             for (int i = 0; i < 200000; ++i) deep += "]}";
                             return deep + "}";
                           }(),
                           [] {
                             std::string deep = R"({"k":)";
                             for (int i = 0; i < 1000000; ++i) deep += R"({"a":)";
                             return deep;  // never closed: refused at the limit, long before its end
                           }()}) {
    CAPTURE(text.substr(0, 40));
    auto checked = check_returned_values(text, 0);
    REQUIRE_FALSE(checked.has_value());
    CHECK(checked.error().error.kind == ErrorKind::serialization);
    CHECK(checked.error().key == "k");
    CHECK(checked.error().error.message.find("nested deeper than 256 levels") != std::string::npos);
  }
}

TEST_CASE("the values' key is read through escapes, and kept to a bounded length") {
  auto checked = check_returned_values(R"({"a":1,"k\u00e9y":)" + std::string(600, '[') + "}", 0);
  REQUIRE_FALSE(checked.has_value());
  CHECK(checked.error().key == "k\xc3\xa9y");
  checked = check_returned_values(R"({")" + std::string(1 << 20, 'k') + R"(":)" + std::string(600, '[') + "}", 0);
  REQUIRE_FALSE(checked.has_value());
  CHECK(checked.error().key.size() == 1024);
}

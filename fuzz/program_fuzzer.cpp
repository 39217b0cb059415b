// Fuzz target: Program::parse (libkcoral/src/program_parser.cpp), the strict parse of the
// `program` part, and Program::to_json, its canonical form.
//
// Input: the program's JSON text. Beyond what the sanitizers catch, it checks that tighter
// limits never accept what the defaults refuse, and agree when both accept; and that the
// canonical form of an accepted program parses again to a program of the same canonical
// form and the same blobs (to_json is "what parse reads"); and that the bound of the
// parse's memory holds at least the text's copies and what the program keeps.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "invariant.hpp"
#include "kcoral/program.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  kcoral::ProgramLimits tight;
  tight.max_program_bytes = 2048;
  tight.max_instructions = 4;
  tight.max_depth = 6;
  tight.max_id_bytes = 4;
  tight.max_shape_rank = 2;
  tight.max_tensor_bytes = 1024;

  const std::uint64_t bound = kcoral::Program::parse_memory_bound(json);
  KCORAL_INVARIANT(bound >= size);
  auto program = kcoral::Program::parse(json);
  auto tight_program = kcoral::Program::parse(json, tight);
  if (tight_program) KCORAL_INVARIANT(program.has_value() && program->to_json() == tight_program->to_json());
  if (!program) {
    KCORAL_INVARIANT(program.error().kind == kcoral::ErrorKind::parse);
    return 0;
  }
  KCORAL_INVARIANT(!program->instructions().empty());
  KCORAL_INVARIANT(program->memory_bytes() <= bound);
  std::string canonical = program->to_json();
  auto again = kcoral::Program::parse(canonical);
  KCORAL_INVARIANT(again.has_value());
  KCORAL_INVARIANT(again->to_json() == canonical);
  KCORAL_INVARIANT(again->blobs() == program->blobs());
  return 0;
}

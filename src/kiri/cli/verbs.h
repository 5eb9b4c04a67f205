#pragma once
// The option table of every kiri verb: what Args parses, what --help prints and what the
// tests check the help against. Adding an option is one row in verbs.cpp.
#include <string>
#include <vector>

#include "kiri/cli/args.h"

namespace kiri::cli {

// Every verb, in the order `kiri --help` lists them; each ends with the options every
// verb takes (--verbose, -h/--help).
const std::vector<VerbSpec>& verb_specs();
// The verb's table; nullptr when there is no such verb.
const VerbSpec* find_verb(const std::string& name);
// The verb's table; kConfig naming the closest verb when there is no such verb.
const VerbSpec& verb_spec(const std::string& name);

}  // namespace kiri::cli

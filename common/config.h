// One configuration story for every binary: command-line flags, environment variables and a
// config file, in that order of precedence (a flag beats the environment, which beats the file,
// which beats the built-in default).
//
//   CLI::App app{"..."};
//   PrepareConfig(app);                       // before any add_option
//   app.add_option("--listen", listen, "...");
//   CLI11_PARSE_WITH_CONFIG(app, argc, argv, "PKB_COORDINATOR");
//
// Every long flag --some-name may also come from the environment as PREFIX_SOME_NAME, and from
// the file named by --config (or PREFIX_CONFIG) as `some-name = value` (TOML / INI, read with
// CLI11's reader; --print-config writes the effective configuration in that format). All three
// sources become one argument list, lowest precedence first, and the last occurrence of a flag
// wins; so a key the binary does not know is refused wherever it comes from.
#ifndef PKB_COMMON_CONFIG_H_
#define PKB_COMMON_CONFIG_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace pkb {

// Sets the option defaults the precedence needs (the last occurrence of a flag wins) and adds
// --config and --print-config.
void PrepareConfig(CLI::App& app);

// argv with the environment's values inserted before the real flags, so that a flag given on the
// command line wins over its variable; options set neither way are then read from the file.
std::vector<std::string> ArgsWithEnvironment(const CLI::App& app, int argc, char** argv,
                                             const std::string& prefix);

// Parses as above; on --print-config prints and returns 0 through `exit_code`. Returns false
// when the caller should exit with *exit_code (help, errors, --print-config).
bool ParseConfig(CLI::App& app, int argc, char** argv, const std::string& prefix,
                 int* exit_code);

}  // namespace pkb

#endif  // PKB_COMMON_CONFIG_H_

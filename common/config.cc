#include "common/config.h"

#include <cstdlib>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"

namespace pkb {
namespace {

// The file named by --config on the command line, else by PREFIX_CONFIG; empty if none.
std::string ConfigPath(int argc, char** argv, const std::string& prefix) {
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) path = argv[++i];
    if (absl::StartsWith(a, "--config=")) path = a.substr(9);
  }
  if (path.empty()) {
    if (const char* p = std::getenv((prefix + "_CONFIG").c_str())) path = p;
  }
  return path;
}

}  // namespace

void PrepareConfig(CLI::App& app) {
  // The last occurrence wins: the sources are handed to the parser lowest precedence first.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--config", "read flags from this TOML/INI file (`flag-name = value` per line)")
      ->configurable(false);
  app.add_flag("--print-config", "print the effective configuration as a config file and exit")
      ->configurable(false);
}

std::vector<std::string> ArgsWithEnvironment(const CLI::App& app, int argc, char** argv,
                                             const std::string& prefix) {
  std::vector<std::string> args;  // lowest precedence first
  std::string file = ConfigPath(argc, argv, prefix);
  if (!file.empty()) {
    // CLI11's own TOML/INI reader; a missing or unreadable file throws a FileError.
    for (const CLI::ConfigItem& item : CLI::ConfigTOML().from_file(file)) {
      if (item.name == "++" || item.name == "--") continue;  // section markers
      std::string name = item.fullname();
      if (item.inputs.size() == 1) {
        args.push_back("--" + name + "=" + item.inputs[0]);
      } else {
        args.push_back("--" + name);
        for (const auto& v : item.inputs) args.push_back(v);
      }
    }
  }
  for (const CLI::Option* opt : app.get_options()) {
    const auto& names = opt->get_lnames();
    if (names.empty() || names[0] == "help" || names[0] == "print-config" ||
        names[0] == "config")
      continue;
    std::string var =
        absl::AsciiStrToUpper(absl::StrReplaceAll(prefix + "_" + names[0], {{"-", "_"}}));
    if (const char* value = std::getenv(var.c_str())) {
      args.push_back("--" + names[0] + "=" + value);
    }
  }
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  // CLI11 takes a vector of arguments in reverse order.
  return std::vector<std::string>(args.rbegin(), args.rend());
}

bool ParseConfig(CLI::App& app, int argc, char** argv, const std::string& prefix,
                 int* exit_code) {
  try {
    app.parse(ArgsWithEnvironment(app, argc, argv, prefix));
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return false;
  }
  if (app.get_option("--print-config")->count() > 0) {
    std::cout << app.config_to_str(/*default_also=*/true, /*write_description=*/true);
    *exit_code = 0;
    return false;
  }
  return true;
}

}  // namespace pkb

#include "common/config.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/files.h"

namespace pkb {
namespace {

struct Parsed {
  bool ok;
  int exit_code = -1;
  std::string listen = "default";
  int rate = 1;
  bool verbose = false;
};

Parsed Parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  PrepareConfig(app);
  Parsed p;
  app.add_option("--listen", p.listen);
  app.add_option("--submit-rate", p.rate);
  app.add_flag("--verbose", p.verbose);
  std::vector<char*> argv = {const_cast<char*>("prog")};
  for (auto& a : args) argv.push_back(a.data());
  p.ok = ParseConfig(app, static_cast<int>(argv.size()), argv.data(), "PKB_TEST", &p.exit_code);
  return p;
}

TEST_CASE("flags beat the environment, which beats the config file, which beats the default") {
  std::string dir = *MakeTempDir("/tmp", "pkb-config-test");
  std::string file = dir + "/c.toml";
  std::ofstream(file) << "listen = \"from-file\"\nsubmit-rate = 7\nverbose = true\n";
  unsetenv("PKB_TEST_LISTEN");
  unsetenv("PKB_TEST_CONFIG");

  Parsed d = Parse({});
  REQUIRE(d.ok);
  CHECK(d.listen == "default");

  Parsed f = Parse({"--config", file});
  REQUIRE(f.ok);
  CHECK(f.listen == "from-file");
  CHECK(f.rate == 7);
  CHECK(f.verbose);

  setenv("PKB_TEST_LISTEN", "from-env", 1);
  Parsed e = Parse({"--config", file});
  CHECK(e.listen == "from-env");
  CHECK(e.rate == 7);  // still from the file

  Parsed c = Parse({"--config", file, "--listen", "from-flag"});
  CHECK(c.listen == "from-flag");

  // The file itself can be named by the environment.
  setenv("PKB_TEST_CONFIG", file.c_str(), 1);
  unsetenv("PKB_TEST_LISTEN");
  Parsed viaenv = Parse({});
  CHECK(viaenv.listen == "from-file");
  unsetenv("PKB_TEST_CONFIG");

  setenv("PKB_TEST_VERBOSE", "false", 1);
  CHECK_FALSE(Parse({"--config", file}).verbose);
  unsetenv("PKB_TEST_VERBOSE");
  CHECK_FALSE(Parse({"--config", file, "--verbose=false"}).verbose);
  Parsed printed = Parse({"--config", file, "--print-config"});
  CHECK_FALSE(printed.ok);
  CHECK(printed.exit_code == 0);
  RemoveTree(dir).IgnoreError();
}

TEST_CASE("bad values name the flag, an unknown key in the file is refused") {
  unsetenv("PKB_TEST_LISTEN");
  setenv("PKB_TEST_SUBMIT_RATE", "lots", 1);
  Parsed bad = Parse({});
  CHECK_FALSE(bad.ok);
  CHECK(bad.exit_code != 0);
  unsetenv("PKB_TEST_SUBMIT_RATE");

  std::string dir = *MakeTempDir("/tmp", "pkb-config-test");
  std::ofstream(dir + "/c.toml") << "lisen = \"typo\"\n";
  Parsed typo = Parse({"--config", dir + "/c.toml"});
  CHECK_FALSE(typo.ok);
  RemoveTree(dir).IgnoreError();
}

}  // namespace
}  // namespace pkb

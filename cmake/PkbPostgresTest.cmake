# A real PostgreSQL server for the tests: CTest starts it once (fixture pkb_postgres, with
# tests/postgres/start.sh) before the tests that need it and stops it after them. Tests that use
# it are registered with PKB_TEST_POSTGRES_PROPERTIES, which requires the fixture and hands them
# the server's URI in PKB_TEST_POSTGRES. Without a server on this machine the variable stays empty
# and those tests report themselves skipped (scripts/install-deps.sh installs one).
file(GLOB _pkb_pg_bins LIST_DIRECTORIES true /usr/lib/postgresql/*/bin)
list(SORT _pkb_pg_bins COMPARE NATURAL ORDER DESCENDING)
find_program(PKB_POSTGRES_INITDB initdb HINTS ${_pkb_pg_bins} NO_CACHE)
# Tests whose output says so count as skipped, not passed.
set(PKB_TEST_POSTGRES_SKIP_REGEX "PostgreSQL cases skipped")
if(PKB_POSTGRES_INITDB)
  get_filename_component(_pkb_pg_bindir ${PKB_POSTGRES_INITDB} DIRECTORY)
  # In /tmp: a server running as `nobody` (CI runs as root) can reach it wherever the checkout is,
  # and the socket's path stays short. One per build tree.
  string(SHA1 _pkb_pg_hash "${CMAKE_BINARY_DIR}")
  string(SUBSTRING ${_pkb_pg_hash} 0 10 _pkb_pg_hash)
  set(_pkb_pg_dir /tmp/pkb-pgtest-${_pkb_pg_hash})
  set(PKB_TEST_POSTGRES_URI "postgresql:///postgres?host=${_pkb_pg_dir}&user=pkb")
  add_test(NAME postgres_start
    COMMAND ${PROJECT_SOURCE_DIR}/tests/postgres/start.sh ${_pkb_pg_dir} ${_pkb_pg_bindir})
  add_test(NAME postgres_stop
    COMMAND ${PROJECT_SOURCE_DIR}/tests/postgres/stop.sh ${_pkb_pg_dir} ${_pkb_pg_bindir})
  set_tests_properties(postgres_start PROPERTIES FIXTURES_SETUP pkb_postgres TIMEOUT 60)
  set_tests_properties(postgres_stop PROPERTIES FIXTURES_CLEANUP pkb_postgres TIMEOUT 60)
  set(PKB_TEST_POSTGRES_PROPERTIES FIXTURES_REQUIRED pkb_postgres
    ENVIRONMENT "PKB_TEST_POSTGRES=${PKB_TEST_POSTGRES_URI}"
    SKIP_REGULAR_EXPRESSION "${PKB_TEST_POSTGRES_SKIP_REGEX}")
  message(STATUS "PostgreSQL tests: server from ${_pkb_pg_bindir}, socket in ${_pkb_pg_dir}")
else()
  set(PKB_TEST_POSTGRES_PROPERTIES SKIP_REGULAR_EXPRESSION "${PKB_TEST_POSTGRES_SKIP_REGEX}")
  message(WARNING "No PostgreSQL server (initdb) found: the PostgreSQL store tests will be "
    "skipped. scripts/install-deps.sh installs it.")
endif()

// The doctest runner shared by kvc-tests and kvc-unit-tests.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

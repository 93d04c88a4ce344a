// What the command line of kvc-store-tests chose: the plugin under test and the parameters of
// its instances, shared by every case.
//
//   kvc-store-tests --plugin <file.so> [--param <key>=<value>]... [--skip-if-absent]
//                   [doctest options]
//
// A parameter value "@tmp" becomes a new empty folder for each instance (removed at exit);
// "@env:NAME" becomes the environment variable NAME, and the program exits 77 (skipped) when
// it is unset or empty; "@env-host:NAME" and "@env-port:NAME" become the parts of a NAME that
// reads host:port. With --skip-if-absent, a plugin file that does not exist is a skip
// too (a store whose library this build did not make).
#pragma once

#include <string>
#include <vector>

#include "store_loader.hpp"

namespace kvc::store_tests {

class Environment {
 public:
  Environment(const std::string& plugin_path, Params params);
  ~Environment();  // removes the folders it made
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  const StorePlugin& plugin() const { return plugin_; }
  // The --param list, with every "@tmp" a new folder.
  Params fresh_params();
  // A new empty folder, removed at exit.
  std::string temp_folder();
  // `suffix` under this run's own prefix, so that runs sharing a server never meet.
  std::string key(const std::string& suffix) const { return key_prefix_ + suffix; }

 private:
  StorePlugin plugin_;
  Params params_;
  std::string key_prefix_;
  std::vector<std::string> folders_;
};

// The one of this run (set by main).
Environment& environment();

}  // namespace kvc::store_tests

// Turns a C++ policy class into a kvc_policy_vtable and a plugin entry point.
//
// A policy class P provides:
//   static constexpr const char* kName;                    // the descriptor's name
//   explicit P(ParamReader& params);                       // reads its parameters
//   void needs(kvc_policy_needs& needs) const noexcept;    // fields start zeroed
// and optionally (absent: the vtable entry is NULL)
//   void score(const kvc_score_job* jobs, size_t n_jobs) const;  // a plain array
//   void budgets(const kvc_budget_request& request, int32_t* budgets) const;
// score and budgets run concurrently for different sequences: they must not modify the
// instance. Anything they throw is caught here and becomes a status code plus a message
// (Error: its code; std::bad_alloc: KVC_ERR_OUT_OF_MEMORY; anything else:
// KVC_ERR_INTERNAL). After the constructor the adapter calls params.finish(), which rejects
// keys the policy did not ask for.
//
// KVC_POLICY_PLUGIN(P) defines the library's one exported symbol, kvc_plugin_entry, which
// returns P's descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "kvcache/kvcache_plugin.h"
#include "params.hpp"

namespace kvc::policies {

// Copies a message into the ABI's error buffer, cut at a UTF-8 character boundary.
void write_error(kvc_plugin_error* error, const char* message) noexcept;

// Runs body; turns every exception into a status code and a message.
template <class Body>
int32_t guard(kvc_plugin_error* error, Body&& body) noexcept {
  try {
    body();
    return KVC_OK;
  } catch (const Error& e) {
    write_error(error, e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    write_error(error, "out of host memory");
    return KVC_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(error, e.what());
    return KVC_ERR_INTERNAL;
  } catch (...) {
    write_error(error, "unknown exception");
    return KVC_ERR_INTERNAL;
  }
}

// Copies needs into the host's struct, no further than the host's struct_size.
void copy_needs(const kvc_policy_needs& from, kvc_policy_needs* to) noexcept;

// The host's score jobs as an array of this plugin's kvc_score_job: the host's own array when
// its struct_size is ours, else a copy of the fields both know (a field the host lacks reads
// as 0; a protected range it lacks as -1, see protected_range()).
class HostJobs {
 public:
  HostJobs(const kvc_score_job* jobs, size_t n_jobs);
  const kvc_score_job* data() const { return jobs_; }

 private:
  const kvc_score_job* jobs_;
  std::vector<kvc_score_job> copies_;
};

// The body of kvc_plugin_entry for one descriptor.
int32_t plugin_entry(const kvc_plugin_descriptor* descriptor, const kvc_host_api* host,
                     const kvc_plugin_descriptor** out_descriptors, size_t* out_count,
                     kvc_plugin_error* error) noexcept;

template <class P, class = void>
struct HasScore : std::false_type {};
template <class P>
struct HasScore<P, std::void_t<decltype(std::declval<const P&>().score(
                       std::declval<const kvc_score_job*>(), size_t{}))>> : std::true_type {};

template <class P, class = void>
struct HasBudgets : std::false_type {};
template <class P>
struct HasBudgets<P, std::void_t<decltype(std::declval<const P&>().budgets(
                         std::declval<const kvc_budget_request&>(), std::declval<int32_t*>()))>>
    : std::true_type {};

template <class P>
struct PolicyAdapter {
  static int32_t create(const kvc_host_api* /*host*/, const kvc_policy_param* params,
                        size_t n_params, void** out_instance, kvc_plugin_error* error) noexcept {
    return guard(error, [&] {
      if (out_instance == nullptr) argument_error("out_instance is NULL");
      *out_instance = nullptr;
      ParamReader reader(P::kName, params, n_params);
      auto instance = std::make_unique<P>(reader);
      reader.finish();
      *out_instance = instance.release();
    });
  }

  static void destroy(void* instance) noexcept { delete static_cast<P*>(instance); }

  static void needs(void* instance, kvc_policy_needs* out_needs) noexcept {
    if (instance == nullptr || out_needs == nullptr) return;
    kvc_policy_needs needs{};
    needs.struct_size = sizeof needs;
    static_cast<const P*>(instance)->needs(needs);
    copy_needs(needs, out_needs);
  }

  static int32_t score(void* instance, const kvc_score_job* jobs, size_t n_jobs,
                       kvc_plugin_error* error) noexcept {
    if constexpr (HasScore<P>::value) {
      return guard(error, [&] {
        if (instance == nullptr) argument_error("instance is NULL");
        if (n_jobs > 0 && jobs == nullptr) argument_error("jobs is NULL but n_jobs > 0");
        HostJobs host_jobs(jobs, n_jobs);
        static_cast<const P*>(instance)->score(host_jobs.data(), n_jobs);
      });
    } else {
      (void)instance, (void)jobs, (void)n_jobs, (void)error;
      return KVC_ERR_INTERNAL;
    }
  }

  static int32_t budgets(void* instance, const kvc_budget_request* request, int32_t* budgets,
                         kvc_plugin_error* error) noexcept {
    if constexpr (HasBudgets<P>::value) {
      return guard(error, [&] {
        if (instance == nullptr || request == nullptr || budgets == nullptr) {
          argument_error("budgets: instance, request or budgets is NULL");
        }
        check_request(*request);
        HostJobs host_jobs(request->jobs, static_cast<size_t>(request->n_heads));
        kvc_budget_request copy{};
        std::memcpy(&copy, request, std::min<size_t>(request->struct_size, sizeof copy));
        copy.jobs = host_jobs.data();
        static_cast<const P*>(instance)->budgets(copy, budgets);
      });
    } else {
      (void)instance, (void)request, (void)budgets, (void)error;
      return KVC_ERR_INTERNAL;
    }
  }

  static void check_request(const kvc_budget_request& request) {
    if (request.struct_size < offsetof(kvc_budget_request, jobs) + sizeof request.jobs) {
      argument_error("kvc_budget_request is smaller than this policy needs");
    }
    if (request.n_heads < 0 || (request.n_heads > 0 && request.configured == nullptr)) {
      argument_error("kvc_budget_request: bad n_heads or NULL configured");
    }
  }

  static constexpr kvc_policy_vtable vtable = {
      sizeof(kvc_policy_vtable),
      &create,
      &destroy,
      &needs,
      HasScore<P>::value ? &score : nullptr,
      HasBudgets<P>::value ? &budgets : nullptr,
  };

  static constexpr kvc_plugin_descriptor descriptor = {
      sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_POLICY, P::kName,
      1u, &vtable,
  };
};

}  // namespace kvc::policies

// Defines the exported entry point of a library holding the one policy Class.
#define KVC_POLICY_PLUGIN(Class)                                                              \
  extern "C" KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(                                      \
      const kvc_host_api* host, const kvc_plugin_descriptor** out_descriptors,                \
      size_t* out_count, kvc_plugin_error* error) {                                           \
    return ::kvc::policies::plugin_entry(&::kvc::policies::PolicyAdapter<Class>::descriptor,  \
                                         host, out_descriptors, out_count, error);            \
  }                                                                                           \
  static_assert(std::is_same_v<decltype(&kvc_plugin_entry), kvc_plugin_entry_fn>,             \
                "kvc_plugin_entry must match kvc_plugin_entry_fn")

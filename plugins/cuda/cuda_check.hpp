// CUDA runtime errors as Errors: a missing device or driver is NO_DEVICE, exhausted
// device memory OUT_OF_MEMORY, anything else PLUGIN, each with the runtime's own message.
#pragma once

#include <cuda_runtime_api.h>

#include "plugin_error.hpp"

namespace kvc::cuda {

inline kvc_status_code status_of(cudaError_t error) {
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorDevicesUnavailable:
      return KVC_ERR_NO_DEVICE;
    case cudaErrorMemoryAllocation:
      return KVC_ERR_OUT_OF_MEMORY;
    default:
      return KVC_ERR_PLUGIN;
  }
}

inline void check_cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error so that later calls are not blamed for it
  fail(status_of(error), "%s: %s (%s)", what, cudaGetErrorString(error), cudaGetErrorName(error));
}

}  // namespace kvc::cuda

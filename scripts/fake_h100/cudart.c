/* A stand-in for the CUDA runtime, for scripts/count_gpu_kernels.py only: loaded before libcudart
   (LD_PRELOAD), it answers the few calls torch makes while it traces fake CUDA tensors (autograd asks
   for the current stream, SDPA and Inductor for the device's properties) as one H100 SXM would.
   It allocates nothing and runs nothing: any other runtime call reaches the real libcudart, which
   fails without a driver, so a step that would run on the GPU stops with CUDA's error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static int current_device = 0;
static uintptr_t last_stream = 0x1000;

cudaError_t cudaGetDevice(int *device) { *device = current_device; return cudaSuccess; }
cudaError_t cudaSetDevice(int device) { current_device = device; return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *count) { *count = 1; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *version) { *version = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *version) { *version = CUDART_VERSION; return cudaSuccess; }

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority) {
  last_stream += 0x10;  /* a distinct handle, never dereferenced */
  *stream = (cudaStream_t)last_stream;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) { return cudaSuccess; }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  *total_bytes = (size_t)80 << 30;
  *free_bytes = *total_bytes - ((size_t)1 << 30);
  return cudaSuccess;
}

/* H100 SXM5 80 GB: sm_90, 132 SMs */
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  memset(prop, 0, sizeof *prop);
  strcpy(prop->name, "NVIDIA H100 80GB HBM3");
  prop->totalGlobalMem = (size_t)80 << 30;
  prop->sharedMemPerBlock = 49152;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->concurrentKernels = 1;
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 << 20;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->streamPrioritiesSupported = 1;
  prop->sharedMemPerMultiprocessor = 233472;
  prop->regsPerMultiprocessor = 65536;
  prop->sharedMemPerBlockOptin = 232448;
  prop->maxBlocksPerMultiProcessor = 32;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 232448; break;
    default: *value = 0;
  }
  return cudaSuccess;
}

/* c10's DriverAPI asks the runtime for driver entry points once; none of them is called while
   tracing but the primary-context query (answered by libcuda.c), so every other one says so. */
static int unsupported_driver_call(void) { return 801; /* CUDA_ERROR_NOT_SUPPORTED */ }

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **function, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status) {
  if (getenv("FAKE_H100_VERBOSE")) fprintf(stderr, "fake_h100: driver entry point %s\n", symbol);
  *function = (void *)unsupported_driver_call;
  if (status) *status = cudaDriverEntryPointSuccess;
  return cudaSuccess;
}

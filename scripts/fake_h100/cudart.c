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
static const struct cudaDeviceProp H100 = {
    .name = "NVIDIA H100 80GB HBM3",
    .totalGlobalMem = (size_t)80 << 30,
    .sharedMemPerBlock = 49152,
    .regsPerBlock = 65536,
    .warpSize = 32,
    .maxThreadsPerBlock = 1024,
    .maxThreadsDim = {1024, 1024, 64},
    .maxGridSize = {2147483647, 65535, 65535},
    .major = 9,
    .minor = 0,
    .multiProcessorCount = 132,
    .concurrentKernels = 1,
    .unifiedAddressing = 1,
    .memoryBusWidth = 5120,
    .l2CacheSize = 50 << 20,
    .maxThreadsPerMultiProcessor = 2048,
    .streamPrioritiesSupported = 1,
    .sharedMemPerMultiprocessor = 233472,
    .regsPerMultiprocessor = 65536,
    .sharedMemPerBlockOptin = 232448,
    .maxBlocksPerMultiProcessor = 32,
};

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  *prop = H100;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = H100.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = H100.minor; break;
    case cudaDevAttrMultiProcessorCount: *value = H100.multiProcessorCount; break;
    case cudaDevAttrWarpSize: *value = H100.warpSize; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = H100.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)H100.sharedMemPerBlockOptin; break;
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

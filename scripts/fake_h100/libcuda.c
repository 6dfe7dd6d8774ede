/* A stand-in libcuda.so.1, for scripts/count_gpu_kernels.py only: c10 opens the driver library and
   asks whether a device has a primary context (autograd's device threads do); none has. */
int cuInit(unsigned int flags) { return 0; }
int cuDriverGetVersion(int *version) { *version = 13000; return 0; }
int cuDevicePrimaryCtxGetState(int device, unsigned int *flags, int *active) {
  if (flags) *flags = 0;
  if (active) *active = 0;
  return 0;
}
int cuGetErrorString(int error, const char **text) { *text = "fake_h100: no driver"; return 0; }

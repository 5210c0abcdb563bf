/*
 * A stand-in for libnvidia-ml.so.1 that soma's tests build with
 *   gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 nvml_stub.c
 * so that worker's GPU detection runs through go-nvml's real loading code
 * (dlopen, versioned symbol lookup, C calls) on machines without a GPU.
 *
 * It exports exactly the NVML functions soma calls; go-nvml resolves each at
 * call time, so a function soma starts calling must be added here too.
 * The types below copy the ABI of nvml.h (CUDA 12): nvmlReturn_t is an
 * int-sized enum, nvmlDevice_t an opaque pointer, nvmlMemory_t three
 * unsigned long longs, nvmlUtilization_t two unsigned ints.
 *
 * Behaviour is read from the environment at every call, so one loaded copy
 * serves every test of a process (a dlopened library cannot be swapped for
 * another once the Go binary's calls are bound to it):
 *   SOMA_NVML_STUB_COUNT       number of GPUs (default 2, at most 8)
 *   SOMA_NVML_STUB_INIT_ERROR  nvmlReturn_t that nvmlInit_v2 returns (default 0)
 *   SOMA_NVML_STUB_UUID_ERROR  nvmlReturn_t that nvmlDeviceGetUUID returns (default 0)
 *   SOMA_NVML_STUB_UTIL_ERROR  nvmlReturn_t that nvmlDeviceGetUtilizationRates returns (default 0)
 *   SOMA_NVML_STUB_INIT_HANG   if 1, nvmlInit_v2 never returns (a GPU fallen off the bus)
 * GPU i is named "Soma Stub GPU i", has UUID
 * GPU-5f0a0000-0000-4000-8000-00000000000i, 80 GiB of memory of which
 * (80-i) GiB are free, and utilisation 10*i percent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st { int index; } *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

#define MAX_GPUS 8
static struct nvmlDevice_st devices[MAX_GPUS] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int initialised;

static int env_int(const char *name, int def) {
	const char *v = getenv(name);
	return (v && *v) ? atoi(v) : def;
}

static int count(void) {
	int n = env_int("SOMA_NVML_STUB_COUNT", 2);
	return n < 0 ? 0 : (n > MAX_GPUS ? MAX_GPUS : n);
}

static int valid(nvmlDevice_t d) {
	return d != NULL && d >= devices && d < devices + count();
}

nvmlReturn_t nvmlInit_v2(void) {
	while (env_int("SOMA_NVML_STUB_INIT_HANG", 0) == 1) pause();
	nvmlReturn_t r = env_int("SOMA_NVML_STUB_INIT_ERROR", 0);
	if (r == NVML_SUCCESS) initialised++;
	return r;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }

nvmlReturn_t nvmlShutdown(void) {
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	initialised--;
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
	static char buf[64];
	switch (r) {
	case 0: return "Success";
	case 1: return "Uninitialized";
	case 2: return "Invalid Argument";
	case 3: return "Not Supported";
	case 9: return "Driver Not Loaded";
	case 999: return "Unknown Error";
	}
	snprintf(buf, sizeof buf, "stub error %d", r);
	return buf;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (!n) return NVML_ERROR_INVALID_ARGUMENT;
	*n = (unsigned int)count();
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (!d || i >= (unsigned int)count()) return NVML_ERROR_INVALID_ARGUMENT;
	*d = &devices[i];
	return NVML_SUCCESS;
}

static nvmlReturn_t put(char *dst, unsigned int len, const char *s) {
	if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
	strcpy(dst, s);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
	char buf[64];
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(buf, sizeof buf, "Soma Stub GPU %d", d->index);
	return put(name, len, buf);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
	char buf[80];
	nvmlReturn_t r = env_int("SOMA_NVML_STUB_UUID_ERROR", 0);
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
	if (r != NVML_SUCCESS) return r;
	snprintf(buf, sizeof buf, "GPU-5f0a0000-0000-4000-8000-%012d", d->index);
	return put(uuid, len, buf);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	const unsigned long long gib = 1ULL << 30;
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d) || !m) return NVML_ERROR_INVALID_ARGUMENT;
	m->total = 80 * gib;
	m->free = (80 - (unsigned long long)d->index) * gib;
	m->used = m->total - m->free;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
	nvmlReturn_t r = env_int("SOMA_NVML_STUB_UTIL_ERROR", 0);
	if (!initialised) return NVML_ERROR_UNINITIALIZED;
	if (!valid(d) || !u) return NVML_ERROR_INVALID_ARGUMENT;
	if (r != NVML_SUCCESS) return r;
	u->gpu = 10 * (unsigned int)d->index;
	u->memory = 5 * (unsigned int)d->index;
	return NVML_SUCCESS;
}

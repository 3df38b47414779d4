"""GPU memory shared between the judge and a runner, with the CUDA driver's virtual memory
management (VMM) API and POSIX file-descriptor handles.

Why: legacy CUDA IPC handles (cudaIpcGetMemHandle) do not work across the pid/ipc namespaces
of the candidate sandbox, and moving every call's inputs and outputs through host memory costs
a round trip over PCIe per call (about 1 GB per call for KernelBench-sized tasks). A VMM
allocation exported as a file descriptor travels over the judge's Unix socket (SCM_RIGHTS) like
the host memfd does, and both processes map the same device memory: inputs are written there
by the judge on the GPU, outputs read back there, nothing crosses PCIe.

The judge owns the allocation (Arena.create); a runner maps it (Arena.import_fd). Views are
torch tensors built through __cuda_array_interface__, so no compiled code is needed here.
Only ctypes and the stable driver entry points (CUDA >= 10.2) are used.
"""
import ctypes
import os

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):  # CUmemAllocationProp: 32 bytes, checked against cuda.h
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", MemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):  # CUmemAccessDesc: 12 bytes
    _fields_ = [("location", MemLocation), ("flags", ctypes.c_int)]


class DriverError(RuntimeError):
    pass


_driver = None


def driver():
    """libcuda, loaded once; the process must already hold a CUDA context (torch made one)."""
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuMemCreate", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle",
                     "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess", "cuMemGetAllocationGranularity",
                     "cuMemUnmap", "cuMemRelease", "cuMemAddressFree", "cuCtxGetCurrent",
                     "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuDeviceGet"):
            getattr(lib, name).restype = ctypes.c_int
        _driver = lib
    return _driver


def check(rc, what):
    if rc != 0:
        raise DriverError(f"{what} failed with CUDA driver error {rc}")


def ensure_context(device):
    """Makes the device's primary context (the one the runtime and torch use) current."""
    cu = driver()
    ctx = ctypes.c_void_p()
    check(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if ctx.value:
        return
    dev = ctypes.c_int()
    check(cu.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device)), "cuDeviceGet")
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def granularity(device):
    cu = driver()
    prop = allocation_prop(device)
    gran = ctypes.c_size_t()
    check(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop),
                                           CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity")
    return gran.value


def allocation_prop(device):
    prop = AllocationProp()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device)
    return prop


class _Interface:
    """What torch.as_tensor needs to wrap a device pointer it does not own."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2}


class Arena:
    """One mapped VMM allocation: base pointer, size, and a uint8 torch tensor over it."""

    def __init__(self, torch, device, handle, nbytes):
        cu = driver()
        self.torch = torch
        self.device = device
        self.nbytes = nbytes
        self.ptr = ctypes.c_uint64()
        check(cu.cuMemAddressReserve(ctypes.byref(self.ptr), ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                                     ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
        check(cu.cuMemMap(self.ptr, ctypes.c_size_t(nbytes), ctypes.c_size_t(0), handle, ctypes.c_uint64(0)),
              "cuMemMap")
        desc = AccessDesc(MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device), CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        check(cu.cuMemSetAccess(self.ptr, ctypes.c_size_t(nbytes), ctypes.byref(desc), ctypes.c_size_t(1)),
              "cuMemSetAccess")
        self.base = torch.as_tensor(_Interface(self.ptr.value, nbytes), device=f"cuda:{device}")

    @classmethod
    def create(cls, torch, nbytes):
        """A new allocation of at least nbytes on the current device; returns (arena, fd)."""
        device = torch.cuda.current_device()
        ensure_context(device)
        cu = driver()
        gran = granularity(device)
        size = (max(nbytes, 1) + gran - 1) // gran * gran
        handle = ctypes.c_uint64()
        prop = allocation_prop(device)
        check(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_uint64(0)),
              "cuMemCreate")
        try:
            fd = ctypes.c_int(-1)
            check(cu.cuMemExportToShareableHandle(ctypes.byref(fd), handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                  ctypes.c_uint64(0)), "cuMemExportToShareableHandle")
            arena = cls(torch, device, handle, size)
        finally:
            cu.cuMemRelease(handle)  # the mapping (and the exported fd) keep the memory alive
        return arena, fd.value

    @classmethod
    def import_fd(cls, torch, fd, nbytes):
        """Maps an allocation another process exported; closes fd."""
        device = torch.cuda.current_device()
        ensure_context(device)
        cu = driver()
        handle = ctypes.c_uint64()
        try:
            check(cu.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  "cuMemImportFromShareableHandle")
        finally:
            os.close(fd)
        try:
            return cls(torch, device, handle, nbytes)
        finally:
            cu.cuMemRelease(handle)

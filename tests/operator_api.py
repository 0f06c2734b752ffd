"""A stand-in for libascendcl.so's C operator API (the aclop path of sources/probe/opmodel.py), as ctypes would
call it, over a simulated runtime's memory: `kernel(runtime, pointers)` computes the operator from its inputs'
and outputs' device pointers. It records what it was called with and which handles are still alive."""


class FakeOperatorApi:
    def __init__(self, runtime, kernel, ret=0):
        self.runtime = runtime
        self.kernel = kernel
        self.ret = ret
        self.live = set()
        self.calls = []

    def _new(self, kind):
        handle = 0x1000 + len(self.calls) + len(self.live)
        self.live.add((kind, handle))
        return handle

    def aclCreateTensorDesc(self, dtype, num_dims, dims, fmt):
        self.calls.append(("desc", dtype, list(dims[:num_dims]), fmt))
        return self._new("desc")

    def aclDestroyTensorDesc(self, desc):
        self.live.remove(("desc", desc))

    def aclCreateDataBuffer(self, pointer, size):
        self.calls.append(("buffer", pointer, size))
        handle = self._new("buffer")
        self.runtime._buffers[handle] = (pointer, size)
        return handle

    def aclDestroyDataBuffer(self, buffer):
        self.live.remove(("buffer", buffer))
        del self.runtime._buffers[buffer]
        return 0

    def aclopCreateAttr(self):
        return self._new("attr")

    def aclopDestroyAttr(self, attr):
        self.live.remove(("attr", attr))

    def aclopSetAttrBool(self, attr, name, value):
        self.calls.append(("attr", name, value))
        return 0

    def aclopCompileAndExecute(self, op_type, n_in, in_descs, in_bufs, n_out, out_descs, out_bufs, attr, engine,
                               compile_flag, op_path, stream):
        self.calls.append(("execute", op_type, n_in, n_out, engine, compile_flag, op_path, stream))
        if self.ret:
            return self.ret
        self.kernel(self.runtime, [self.runtime._buffers[buffer][0]
                                   for buffer in list(in_bufs[:n_in]) + list(out_bufs[:n_out])])
        return 0


class FakeAclnnApi:
    """libnnopbase.so's tensors and scalars and libopapi.so's two-phase aclnnAdd, as ctypes would call them, over a
    simulated runtime's memory: `kernel(runtime, pointers)` computes the Add from the tensors' device pointers."""

    def __init__(self, runtime, kernel, first_phase_ret=0):
        self.runtime = runtime
        self.kernel = kernel
        self.first_phase_ret = first_phase_ret
        self.tensors = {}  # handle -> (dims, dtype, strides, format, device pointer)
        self.scalars = {}  # handle -> (value, dtype)
        self.executors = {}  # executor -> tensor handles
        self.calls = []

    def _handle(self):
        return 0x2000 + len(self.calls)

    def aclCreateTensor(self, dims, rank, dtype, strides, offset, fmt, storage_dims, storage_rank, pointer):
        self.calls.append(("tensor", list(dims[:rank]), dtype, list(strides[:rank]), offset, fmt))
        handle = self._handle()
        self.tensors[handle] = pointer
        return handle

    def aclDestroyTensor(self, tensor):
        del self.tensors[tensor]
        return 0

    def aclCreateScalar(self, address, dtype):
        import ctypes

        self.calls.append(("scalar", ctypes.c_int32.from_address(address).value, dtype))
        handle = self._handle()
        self.scalars[handle] = dtype
        return handle

    def aclDestroyScalar(self, scalar):
        del self.scalars[scalar]
        return 0

    def aclnnAddGetWorkspaceSize(self, first, second, alpha, out, size, executor):
        self.calls.append(("workspace size", alpha in self.scalars))
        if self.first_phase_ret:
            return self.first_phase_ret
        size._obj.value = 1024
        executor._obj.value = 0x3000
        self.executors[0x3000] = (first, second, out)
        return 0

    def aclnnAdd(self, workspace, size, executor, stream):
        self.calls.append(("execute", size, executor, stream))
        self.kernel(self.runtime, [self.tensors[handle] for handle in self.executors.pop(executor)])
        return 0

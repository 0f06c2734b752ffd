"""The torch_npu variant of the probe, run in the probe child: a fixed-seed matmul on the NPU compared
with the same matmul on the CPU (shared/reference/acl-probe-fan-power.md section 3).

    init         import torch and torch_npu; prebuilt kernels only (no online compile in a probe)
    set_device   torch.npu.set_device("npu:<logical id>")
    memcpy       both matrices to the NPU; one back, compared exactly
    matmul       torch.mm on the NPU, torch.npu.synchronize(), result back to the host

torch_npu reports device errors as RuntimeError whose text often carries the ACL error code; the
daemon looks the code up in that text.
"""

import contextlib

from .protocol import NPU_ERROR, WRONG_DATA, WRONG_RESULT
from .stages import StageFailed, Unavailable

SEED = 20240607


def run(options, stages):
    with stages.stage("init"):
        torch = _import_torch()
    device = "npu:{}".format(options.device)
    size = options.matmul_size
    generator = torch.Generator().manual_seed(SEED)
    left = torch.randn(size, size, generator=generator)
    right = torch.randn(size, size, generator=generator)
    with stages.stage("set_device"), _npu_errors():
        torch.npu.set_device(device)
    with stages.stage("memcpy"), _npu_errors():
        left_npu, right_npu = left.to(device), right.to(device)
        if not torch.equal(left_npu.cpu(), left):
            raise StageFailed("a matrix copied to the NPU and back differs from the original", reason=WRONG_DATA)
    with stages.stage("matmul"), _npu_errors():
        product = torch.mm(left_npu, right_npu)
        torch.npu.synchronize()
        got = product.cpu()
        expected = torch.mm(left, right)
        tolerance = options.matmul_tolerance
        if not torch.allclose(got, expected, rtol=tolerance, atol=tolerance):
            worst = (got - expected).abs().max().item()
            raise StageFailed("a {0}x{0} matmul on the NPU differs from the CPU's by up to {1:.4g} "
                              "(tolerance {2})".format(size, worst, tolerance), reason=WRONG_RESULT)
    return {}


def _import_torch():
    try:
        import torch
        import torch_npu  # noqa: F401 - registers the "npu" device with torch
    except ImportError as exc:
        raise Unavailable("torch_npu cannot be imported: {}".format(exc)) from None
    if hasattr(torch.npu, "set_compile_mode"):
        torch.npu.set_compile_mode(jit_compile=False)
    return torch


@contextlib.contextmanager
def _npu_errors():
    try:
        yield
    except RuntimeError as exc:
        text = " ".join(str(exc).split())
        raise StageFailed(text[:500] or type(exc).__name__, reason=NPU_ERROR) from None

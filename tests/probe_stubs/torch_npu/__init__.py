"""A stand-in for torch_npu: importing it gives torch its `npu` namespace, as the real one does."""

import types

import torch

_state = {"device": None, "jit_compile": True}


def _set_device(device):
    _state["device"] = device


def _synchronize():
    return None


def _set_compile_mode(jit_compile):
    _state["jit_compile"] = jit_compile


torch.npu = types.SimpleNamespace(set_device=_set_device, synchronize=_synchronize,
                                  set_compile_mode=_set_compile_mode)

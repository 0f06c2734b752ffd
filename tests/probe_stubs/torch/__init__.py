"""A stand-in for the parts of PyTorch that npumon's torch probe uses (see ../README.md)."""

import os
import random


def _fault():
    return os.environ.get("FAKE_TORCH_NPU", "")


class Generator:
    def manual_seed(self, seed):
        self.random = random.Random(seed)
        return self


class _Scalar:
    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


class Tensor:
    def __init__(self, rows, device="cpu"):
        self.rows = [list(row) for row in rows]
        self.device = device

    def to(self, device):
        if _fault() == "error":
            raise RuntimeError("call aclrtMemcpy failed, error code is 507053\n[ERROR] device mem error")
        return Tensor(self.rows, device)

    def cpu(self):
        rows = self.rows
        if self.device != "cpu" and _fault() == "wrong_copy":
            rows = [list(row) for row in rows]
            rows[0][0] += 0.5
        return Tensor(rows, "cpu")

    def __sub__(self, other):
        return Tensor([[a - b for a, b in zip(x, y)] for x, y in zip(self.rows, other.rows)], self.device)

    def abs(self):
        return Tensor([[abs(a) for a in row] for row in self.rows], self.device)

    def max(self):
        return _Scalar(max(max(row) for row in self.rows))


def randn(rows, columns, generator):
    return Tensor([[generator.random.gauss(0.0, 1.0) for _ in range(columns)] for _ in range(rows)])


def mm(left, right):
    columns = list(zip(*right.rows))
    rows = [[sum(a * b for a, b in zip(row, column)) for column in columns] for row in left.rows]
    if left.device != "cpu" and _fault() == "wrong_matmul":
        rows[0][0] += 1.0
    return Tensor(rows, left.device)


def equal(left, right):
    return left.rows == right.rows


def allclose(left, right, rtol, atol):
    return all(abs(a - b) <= atol + rtol * abs(b) for x, y in zip(left.rows, right.rows) for a, b in zip(x, y))

"""npumon: monitoring and health checks for Huawei Ascend NPU hosts."""

__version__ = "0.1.0"

"""What each chip should reach, from public specifications: PCIe link, HBM bandwidth, peak FP16. Pure.

docs/diag.md lists every figure with its source. The diag judges its measurements relative to these: a
figure that is not published is None, and the item is then reported without a pass mark against it.
"""

from typing import NamedTuple, Optional

GB = 1e9
TFLOPS = 1e12


class Expected(NamedTuple):
    """Per chip (one die of a dual-die package): the PCIe link the product has (GT/s, lanes; None on SoC
    boards), the memory bandwidth in bytes/s, peak dense FP16 in FLOP/s, and whether chips talk over HCCS."""

    product: str
    pcie_gts: Optional[float]
    pcie_width: Optional[int]
    memory_bandwidth: Optional[float]
    fp16_flops: Optional[float]
    hccs: bool


# Keyed by the chip name npu-smi prints (ChipSample.name). The 910B figures are per chip of Atlas 800T/800I
# A2; Ascend910 is one die of the A3 (910_93) package, which npu-smi shows as two chips.
EXPECTED = {
    "910A": Expected("Atlas 800 (9000)", 16.0, 16, 1200 * GB, 256 * TFLOPS, True),
    "910B1": Expected("Atlas 800T A2", 32.0, 16, 1600 * GB, 414 * TFLOPS, True),
    "910B2": Expected("Atlas 800T A2", 32.0, 16, 1600 * GB, 376 * TFLOPS, True),
    "910B3": Expected("Atlas 800T/800I A2", 32.0, 16, 1600 * GB, 313 * TFLOPS, True),
    "910B4": Expected("Atlas 800I A2", 32.0, 16, 800 * GB, 280 * TFLOPS, True),
    "Ascend910": Expected("Atlas 900/800 A3 (one die)", 32.0, 16, 1600 * GB, 376 * TFLOPS, True),
    "310P3": Expected("Atlas 300I Duo / Pro (one chip)", 16.0, 16, 204 * GB, 70 * TFLOPS, False),
    "310B4": Expected("Atlas 200I/500 A2", None, None, None, None, False),
    "Ascend950PR": Expected("Atlas 350", 32.0, 16, 1600 * GB, None, False),
}

# PCIe payload rate per lane in bytes/s by link speed: 2.5 and 5 GT/s use 8b/10b, 8 GT/s and above 128b/130b.
_ENCODING = {2.5: 0.8, 5.0: 0.8}


def expected_for(chip_name: Optional[str]) -> Optional[Expected]:
    return EXPECTED.get(chip_name or "")


def pcie_bandwidth(speed_gts: Optional[float], width: Optional[int]) -> Optional[float]:
    """A PCIe link's raw payload bandwidth in bytes/s per direction (before packet overhead)."""
    if not speed_gts or not width:
        return None
    return speed_gts * 1e9 * _ENCODING.get(speed_gts, 128.0 / 130.0) / 8.0 * width


def pcie_generation(speed_gts: Optional[float]) -> Optional[int]:
    return {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}.get(speed_gts or 0.0)

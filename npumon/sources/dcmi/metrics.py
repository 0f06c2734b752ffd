"""The metric families of what the DCMI backend reads beyond npu-smi's outputs (ChipSample.extra), and of the ECC
counters per bit, which DCMI reads on every product and npu-smi's -t ecc prints on some. Where no backend read a
value the family carries no sample.
Clocks in hertz, like every npumon_* family in base units."""

from typing import Any

from ...model import Snapshot
from ...outputs.families import MetricSpec

CHIP = ("npu", "chip")
MHZ = 1e6

METRICS = (
    MetricSpec("npumon_chip_board_info", CHIP + ("board_id", "slot_id", "npu_name", "pcie_vendor_id",
                                                 "pcie_device_id", "pcie_subvendor_id", "pcie_subdevice_id"),
               "The chip's board and PCIe ids as DCMI reports them, value 1 (DCMI backend only: "
               "dcmi_get_device_board_info, dcmi_get_device_pcie_info_v2, the chip info's npu_name)."),
    MetricSpec("npumon_chip_aicores", CHIP, "AI Cores of the chip (DCMI backend only: the chip info)."),
    MetricSpec("npumon_chip_aicore_rated_frequency_hertz", CHIP,
               "The AI Core's rated clock (DCMI backend only: dcmi_get_device_frequency type 9); against the "
               "current clock it shows throttling."),
    MetricSpec("npumon_chip_hbm_frequency_hertz", CHIP, "The HBM clock (DCMI backend only: dcmi_get_device_hbm_info)."),
    MetricSpec("npumon_chip_ecc_aggregate_errors", CHIP + ("memory", "bit"),
               "ECC errors over the chip's life, which a reboot does not clear (dcmi_get_device_ecc_info's "
               "aggregate totals; on npu-smi where its -t ecc prints them)."),
    MetricSpec("npumon_chip_ecc_isolated_pages_by_bit", CHIP + ("memory", "bit"),
               "Memory pages isolated after single- or double-bit ECC errors (dcmi_get_device_ecc_info; on "
               "npu-smi where its -t ecc prints them; npumon_chip_ecc_isolated_pages is their sum)."),
)


def export(snapshot: Snapshot, out: Any) -> None:
    for chip in snapshot.chips:
        ids = (chip.npu, chip.chip)
        extra = chip.extra
        if "board_id" in extra or "pcie_vendor_id" in extra:
            out.add("npumon_chip_board_info", 1, ids + tuple(extra.get(key) for key in (
                "board_id", "slot_id", "npu_name", "pcie_vendor_id", "pcie_device_id", "pcie_subvendor_id",
                "pcie_subdevice_id")))
        out.add("npumon_chip_aicores", extra.get("aicore_count"), ids)
        for name, key in (("npumon_chip_aicore_rated_frequency_hertz", "aicore_rated_freq_mhz"),
                          ("npumon_chip_hbm_frequency_hertz", "hbm_freq_mhz")):
            value = extra.get(key)
            out.add(name, None if value is None else value * MHZ, ids)
        for memory, counters in sorted((chip.ecc_counters or {}).items()):
            for bit in ("single", "double"):
                out.add("npumon_chip_ecc_aggregate_errors", counters.get("aggregate_" + bit), ids + (memory, bit))
                out.add("npumon_chip_ecc_isolated_pages_by_bit", counters.get("isolated_" + bit),
                        ids + (memory, bit))

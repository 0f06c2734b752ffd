"""Turn a product and a scenario's host values into the fake host tree's spec (hostroot.HostRootSpec)."""

from typing import Any, Dict, List

from .hostroot import HostRootSpec, SimLink
from .products import FAMILY_910, FAMILY_910_93, FAMILY_910B, FAMILY_950, Product

# The NPUs' PCI device ids as the reference gives them (npu-smi -t board; the driver's ascend_bug_report.sh);
# none is known for the 310 family, whose simulated PCI devices have no vendor/device files.
PCI_DEVICE_IDS = {FAMILY_910: 0xD801, FAMILY_910B: 0xD802, FAMILY_910_93: 0xD803, FAMILY_950: 0xD806}


def host_root_spec(product: Product, host: Dict[str, Any], cpu_busy_ratio: List[float]) -> HostRootSpec:
    """`host` is a scenario's host section with defaults filled in; `cpu_busy_ratio` has one value per node."""
    missing = list(product.absent_device_files)
    missing += [path for path in host["missing_device_files"] if path not in missing]
    return HostRootSpec(
        hostname=host["hostname"],
        cpus_per_node=host["cpus_per_node"],
        numa_nodes=host["numa_nodes"],
        cpu_busy_ratio=cpu_busy_ratio,
        memory_total_bytes=host["memory_total_bytes"],
        memory_available_bytes=host["memory_available_bytes"],
        numa_balancing=host["numa_balancing"],
        max_map_count=host["max_map_count"],
        driver_version=host["driver_version"],
        firmware_version=host["firmware_version"],
        cann_version=host["cann_version"],
        driver_compatible_firmware=host["driver_compatible_firmware"],
        firmware_compatible_driver=host["firmware_compatible_driver"],
        device_count=len(product.slots()),
        missing_device_files=missing,
        inaccessible_device_files=list(host["inaccessible_device_files"]),
        links=_links(product, host["pcie_links"], host["numa_nodes"]),
    )


def _links(product: Product, overrides: List[Dict[str, Any]], numa_nodes: int) -> List[SimLink]:
    """One link per PCIe bus id (the two chips of a 300I Duo share one), at full speed unless overridden."""
    if product.pcie_max_speed is None or product.pcie_max_width is None:
        return []
    by_device = {override["device"]: override for override in overrides}
    links: Dict[str, SimLink] = {}
    slots = product.slots()
    for index, slot in enumerate(slots):
        if slot.bus_id is None or slot.bus_id in links:
            continue
        override = by_device.get(slot.device_id, {})
        links[slot.bus_id] = SimLink(
            bus_id=slot.bus_id,
            current_speed=override.get("current_speed", product.pcie_max_speed),
            max_speed=product.pcie_max_speed,
            current_width=override.get("current_width", product.pcie_max_width),
            max_width=product.pcie_max_width,
            numa_node=index * numa_nodes // len(slots),  # first half of the cards on node 0, as on Atlas 800
            pci_device_id=PCI_DEVICE_IDS.get(product.family),
        )
    return list(links.values())

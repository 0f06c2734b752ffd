"""THE list of sources. `npumon check` and the daemon both walk it; so do the config schema (sections), the
rules (facts) and the exporter (metric families). Adding a source is one module with a SPEC plus one line here.

Order matters only where a source builds on another's part of the Snapshot: npu-smi lists the chips, the host
source then sets the host part (and each chip's PCIe link), and the sources after it add to those.
"""

from .ambient import SPEC as AMBIENT
from .chipcount import SPEC as CHIP_COUNT
from .dcmi.source import SPEC as DCMI
from .hccn.source import SPEC as HCCN
from .host.source import SPEC as HOST
from .k8s.source import SPEC as KUBERNETES
from .kmsg.source import SPEC as KMSG
from .npusmi.source import SPEC as NPU_SMI
from .probe.source import SPEC as PROBE
from .procs.source import SPEC as PROCESSES
from .serving.source import SPEC as SERVING

SOURCES = (
    NPU_SMI,  # the main table (the primary tier: rules follow it) and the -t queries DCMI does not read
    DCMI,  # with collect.backend dcmi (or auto and a library that initialises): the chip values, in a worker
    HOST,  # CPU, NUMA, memory, versions, device files, PCIe links
    PROCESSES,  # the CPU time and D state of the processes holding each chip (/proc)
    CHIP_COUNT,  # the chips npu-smi lists and the NPUs on the PCI bus against the count the host should have
    SERVING,  # the inference server's request queue depth
    AMBIENT,  # the inlet/board temperature for the fan governor
    PROBE,  # the liveness probe on the NPU
    HCCN,  # the NPUs' RoCE ports through hccn_tool (per chip, by the physical id the chips above carry)
    KUBERNETES,  # which pod holds each chip, from the kubelet's pod-resources socket (on where it exists)
    KMSG,  # the Ascend driver's fault lines in the kernel log (after the pods: it tells a job's faults apart)
)

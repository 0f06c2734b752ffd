"""The structs the simulated libdcmi.so fills have the real header's layout, and the tests' ctypes binding
agrees with it: sizes and offsets measured by compiling the header, against shared/reference/dcmi/DCMI.md's
figures (LP64)."""

import ctypes
import subprocess

import pytest
from fake_dcmi_binding import (BoardInfo, ChipInfo, ChipInfoV2, DieId, EccInfo, ElabelInfo, HbmInfo, MemoryInfoV3,
                               MultiUtilization, PcieInfoAll, ProcMemInfo)

from npumon.sim.dcmi.build import SOURCE_DIR, find_compiler

# struct -> (ctypes binding, size per DCMI.md section 3, a field whose offset DCMI.md gives, that offset)
LAYOUTS = {
    "dcmi_chip_info": (ChipInfo, 100, "aicore_cnt", 96),
    "dcmi_chip_info_v2": (ChipInfoV2, 132, "npu_name", 100),
    "dcmi_pcie_info_all": (PcieInfoAll, 64, "bdf_funcid", 28),
    "dcmi_die_id": (DieId, 20, "soc_die", 0),
    "dcmi_ecc_info": (EccInfo, 36, "double_bit_next_isolated_pages_cnt", 32),
    "dcmi_hbm_info": (HbmInfo, 32, "bandwith_util_rate", 28),
    "dcmi_get_memory_info_stru": (MemoryInfoV3, 112, "utiliza", 48),
    "dcmi_board_info": (BoardInfo, 16, "slot_id", 12),
    "dcmi_multi_utilization_info": (MultiUtilization, 48, "npu_util", 12),
    "dcmi_proc_mem_info": (ProcMemInfo, 16, "proc_mem_usage", 8),
    "dcmi_elabel_info": (ElabelInfo, 1280, "serial_number", 1024),
}

pytestmark = pytest.mark.integration  # builds and loads a C library with the system compiler


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    compiler = find_compiler()
    if compiler is None:
        pytest.skip("no C compiler (cc or gcc) to measure the header's structs")
    directory = tmp_path_factory.mktemp("layouts")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "dcmi_interface_api.h"', "int main(void) {"]
    lines += ['printf("%s %zu %zu\\n", "{0}", sizeof(struct {0}), offsetof(struct {0}, {1}));'.format(name, field)
              for name, (_, _, field, _) in LAYOUTS.items()]
    source, program = directory / "layouts.c", directory / "layouts"
    source.write_text("\n".join(lines + ["return 0; }"]) + "\n")
    subprocess.run([compiler, "-I", SOURCE_DIR, "-o", str(program), str(source)], check=True, timeout=120)
    out = subprocess.run([str(program)], check=True, capture_output=True, text=True, timeout=30).stdout
    return {name: (int(size), int(offset)) for name, size, offset in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_struct_layouts_match_the_header_and_the_reference(measured, name):
    binding, size, field, offset = LAYOUTS[name]
    assert measured[name] == (size, offset)
    assert (ctypes.sizeof(binding), getattr(binding, field).offset) == (size, offset)

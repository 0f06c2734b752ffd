"""The simulated libdcmi.so: DCMI in C with the real header's signatures, answering from a simulation.

For a DCMI backend under `--simulate` (or a test):

    from npumon.sim import prepare_simulation
    from npumon.sim.dcmi import build_fake_library

    sim = prepare_simulation(state_dir, scenario="overheat")  # also writes <state_dir>/dcmi-state.txt
    library = build_fake_library()                           # compiled with cc/gcc once per source version
    # in the worker process, with sim.env in its environment (NPUMON_SIM_STATE=<state_dir>):
    dcmi = ctypes.CDLL(library); dcmi.dcmi_init() ...

Every call reads the simulation's state (state.py: the file and its format), so it answers what the
simulated npu-smi prints at the same moment, in DCMI's units, refuses with -8255
(DCMI_ERR_CODE_NOT_SUPPORT) what the product's real library refuses, and obeys the faults set with
set_dcmi_faults (faults.py, state.py): a failing dcmi_init, a call that hangs, a call that segfaults, return codes
per call and chip. Scenario behaviours carry over: `hang` hangs every call after dcmi_init, `unsupported`
refuses every getter npu-smi's main table does not need. `garbage` has no DCMI form (the answers are
binary structs) and answers normally.

Sources: fake_dcmi.c (enumeration, identity), fake_dcmi_getters.c (monitoring getters), fake_dcmi_state.c
(state file, faults, support), fake_dcmi_values.c (a chip's values at the call's moment); headers:
dcmi_interface_api.h (the real header, mind-cluster's copy) and dcmi_driver_extras.h (declarations only in
the driver's own header).
"""

from .build import FakeDcmiBuildError, build_fake_library, default_cache_dir, find_compiler
from .state import (DCMI_CLOCK_ENV, DCMI_PRODUCTS, DCMI_STATE_ENV, DCMI_STATE_FILE, dcmi_state_path, set_dcmi_faults,
                    write_dcmi_state)

__all__ = ["FakeDcmiBuildError", "build_fake_library", "default_cache_dir", "find_compiler", "set_dcmi_faults",
           "DCMI_CLOCK_ENV", "DCMI_PRODUCTS", "DCMI_STATE_ENV", "DCMI_STATE_FILE", "dcmi_state_path", "write_dcmi_state"]

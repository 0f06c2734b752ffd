"""`import acl` in a probe child under `npumon ... --simulate`: the simulated pyACL of npumon/sim/pyacl.py,
with the module-level names of the real one (acl.init, acl.rt.*, acl.mdl.*, acl.util.*, ...)."""

from npumon.sim.pyacl import load_for_probe_child

_runtime = load_for_probe_child()

init = _runtime.init
finalize = _runtime.finalize
get_soc_name = _runtime.get_soc_name
get_version = _runtime.get_version
get_device_capability = _runtime.get_device_capability
if _runtime.has("get_version_str"):  # newer pyACL only
    get_version_str = _runtime.get_version_str
create_data_buffer = _runtime.create_data_buffer
destroy_data_buffer = _runtime.destroy_data_buffer
rt = _runtime.rt
mdl = _runtime.mdl
util = _runtime.util

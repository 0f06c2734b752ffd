"""`import acl` in a probe child under `npumon ... --simulate`: the simulated pyACL of npumon/sim/pyacl.py,
with the module-level names of the real one (acl.init, acl.rt.*, acl.mdl.*, acl.op.*, acl.util.*, ...)."""

from npumon.sim.diag_acl import load_for_child

_runtime = load_for_child()

init = _runtime.init
finalize = _runtime.finalize
get_soc_name = _runtime.get_soc_name
get_version = _runtime.get_version
get_device_capability = _runtime.get_device_capability
if _runtime.has("get_version_str"):  # newer pyACL only
    get_version_str = _runtime.get_version_str
create_data_buffer = _runtime.create_data_buffer
create_tensor_desc = _runtime.create_tensor_desc
destroy_tensor_desc = _runtime.destroy_tensor_desc
get_tensor_desc_size = _runtime.get_tensor_desc_size
destroy_data_buffer = _runtime.destroy_data_buffer
rt = _runtime.rt
mdl = _runtime.mdl
util = _runtime.util
op = _runtime.op

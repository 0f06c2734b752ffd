"""What the ACL runtime itself reports about the device, asked in the probe child after the probe's own calls,
so that acl.init and set_device are paid once. Runs in the probe child (Python 3.7+).

Each fact is {"value": v, "source": "<the pyACL call>", "status": "ok" | "unsupported" | "error"} (+ "error":
text). The newer calls exist only in newer pyACL: each is looked up with hasattr, never assumed, and a missing
call is "unsupported", not an error. A call that returns an error code is an "error" fact and never fails the
probe: the probe judges liveness; these are extra facts. Call forms (shared/reference/acl-probe-fan-power.md
section 1.3, and hicann/runtime python/pyACL/rt/rt_device.cpp):

    count, ret = acl.rt.get_device_count()
    name = acl.get_soc_name()                              (None on failure)
    major, minor, patch, ret = acl.get_version()           the ACL interface version, not CANN's
    text, ret = acl.get_version_str(package)               CANN 8.x+; "driver" or a package under share/info
    info, ret = acl.rt.get_device_utilization_rate(id)     {cube,vector,aicpu,memory}_utilization, percent; -1: not
                                                           supported on this device
    value, ret = acl.rt.get_device_info(id, attr)          aclrtDevAttr: AICPU 1, AICORE 101, VECTOR 201
    value, ret = acl.get_device_capability(id, info)       older aclDeviceInfo: AI_CORE_NUM 0, VECTOR_CORE_NUM 1
"""

ACL_SUCCESS = 0
OK = "ok"
UNSUPPORTED = "unsupported"
ERROR = "error"

# aclrtDevAttr (acl.rt.get_device_info) and the older aclDeviceInfo (acl.get_device_capability)
DEV_ATTRS = (("aicpu_count", 1, None), ("aicore_count", 101, 0), ("vector_core_count", 201, 1))
UTILIZATION_KEYS = (("cube_ratio", "cube_utilization"), ("vector_ratio", "vector_utilization"),
                    ("aicpu_ratio", "aicpu_utilization"), ("memory_ratio", "memory_utilization"))
# Facts asked once the runtime is up (no device needed), then per device once set_device succeeded.
RUNTIME_FACTS = ("device_count", "soc_name", "acl_version", "runtime_version", "driver_version")
DEVICE_FACTS = tuple(name for name, _ in UTILIZATION_KEYS) + tuple(name for name, _, _ in DEV_ATTRS)
MEMORY_FACTS = ("hbm_free_bytes", "hbm_total_bytes")
FACT_NAMES = RUNTIME_FACTS + MEMORY_FACTS + DEVICE_FACTS
# the package whose version get_version_str reports as the runtime's (a directory under share/info)
RUNTIME_PACKAGE = "runtime"


def fact(value, source, status=OK, error=None):
    entry = {"value": value, "source": source, "status": status}
    if error is not None:
        entry["error"] = error
    return entry


def unsupported(source):
    return fact(None, source, UNSUPPORTED)


def failed(source, error):
    return fact(None, source, ERROR, error)


def _call(source, function, *args):
    """The call's result, or an "error" fact when it raises (a binding whose form differs from the documented)."""
    try:
        return function(*args), None
    except Exception as exc:  # noqa: BLE001 - an odd binding must cost one fact, never the probe
        return None, failed(source, "{}: {}".format(type(exc).__name__, exc))


def _value_ret(source, function, *args):
    """For calls returning (value, ret): the "ok" fact or the "error" fact."""
    result, problem = _call(source, function, *args)
    if problem is not None:
        return problem
    try:
        value, ret = result
    except (TypeError, ValueError):
        return failed(source, "unexpected result {!r}".format(result)[:200])
    if ret != ACL_SUCCESS:
        return failed(source, "returned {}".format(ret))
    return fact(value, source)


def runtime_facts(acl):
    """Facts of the runtime as a whole: device count, SoC name, versions. Needs acl.init."""
    facts = {}
    if hasattr(acl, "rt") and hasattr(acl.rt, "get_device_count"):
        facts["device_count"] = _value_ret("acl.rt.get_device_count", acl.rt.get_device_count)
    else:
        facts["device_count"] = unsupported("acl.rt.get_device_count")
    if hasattr(acl, "get_soc_name"):
        name, problem = _call("acl.get_soc_name", acl.get_soc_name)
        facts["soc_name"] = problem or (fact(name, "acl.get_soc_name") if isinstance(name, str) and name
                                        else failed("acl.get_soc_name", "returned no name"))
    else:
        facts["soc_name"] = unsupported("acl.get_soc_name")
    facts["acl_version"] = _acl_version(acl)
    for name, package in (("runtime_version", RUNTIME_PACKAGE), ("driver_version", "driver")):
        source = 'acl.get_version_str("{}")'.format(package)
        facts[name] = (_value_ret(source, acl.get_version_str, package) if hasattr(acl, "get_version_str")
                       else unsupported(source))
    return facts


def _acl_version(acl):
    source = "acl.get_version"
    if not hasattr(acl, "get_version"):
        return unsupported(source)
    result, problem = _call(source, acl.get_version)
    if problem is not None:
        return problem
    try:
        major, minor, patch, ret = result
    except (TypeError, ValueError):
        return failed(source, "unexpected result {!r}".format(result)[:200])
    if ret != ACL_SUCCESS:
        return failed(source, "returned {}".format(ret))
    return fact("{}.{}.{}".format(major, minor, patch), source)


def memory_facts(free, total, source="acl.rt.get_mem_info(ACL_HBM_MEM)"):
    """The probe's own get_mem_info answer (on 310P / 310B the runtime maps HBM to DDR)."""
    return {"hbm_free_bytes": fact(free, source), "hbm_total_bytes": fact(total, source)}


def device_facts(acl, device):
    """Facts of one device: utilisation by engine and core counts. Needs set_device on `device`."""
    facts = {}
    source = "acl.rt.get_device_utilization_rate"
    if hasattr(acl.rt, "get_device_utilization_rate"):
        answer = _value_ret(source, acl.rt.get_device_utilization_rate, device)
        info = answer["value"]
        for name, key in UTILIZATION_KEYS:
            if answer["status"] != OK:
                facts[name] = answer
            elif not isinstance(info, dict) or not isinstance(info.get(key), int):
                facts[name] = failed(source, "no {} in {!r}".format(key, info)[:200])
            elif info[key] < 0:  # the runtime's "not supported on this device"
                facts[name] = unsupported(source)
            else:
                facts[name] = fact(min(100, info[key]) / 100.0, source)
    else:
        facts.update((name, unsupported(source)) for name, _ in UTILIZATION_KEYS)
    for name, attr, old_info in DEV_ATTRS:
        if hasattr(acl.rt, "get_device_info"):
            facts[name] = _value_ret("acl.rt.get_device_info", acl.rt.get_device_info, device, attr)
        elif old_info is not None and hasattr(acl, "get_device_capability"):
            facts[name] = _value_ret("acl.get_device_capability", acl.get_device_capability, device, old_info)
        else:
            facts[name] = unsupported("acl.rt.get_device_info")
    return facts

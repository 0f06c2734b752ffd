"""The NPU liveness probe: prove that each chip still initialises, copies data and computes.

The daemon never imports the Ascend runtime: ACL allows one acl.init per process and a hung device
blocks synchronous calls, so each probe runs in a child process (`python -m npumon.sources.probe.child`) with a
hard deadline, and the daemon kills the child's process group when it passes.

    config.py      the `probe:` section of the config file
    launch.py      the child's argv and environment (where pyACL and the CANN libraries are)
    child.py       the child's entry point; stages.py times its stages
    acl_probe.py   the pyACL sequence; torch_probe.py the torch_npu variant; compare.py checks data
    compute.py     the compute step: a known-answer Add on the AI Core by the path the install offers
    opmodel.py     single operators without a user model: the ATC build and its cache, the aclop fallback (also
                   npumon diag's)
    outcome.py     the child's output -> ProbeOutcome (parent side)
    aclcodes.py    the ACL error codes that matter for liveness: name, meaning, what to do
    samples.py     ProbeOutcome -> the ProbeSample a chip carries in the Snapshot
    source.py      ProbeSource: scheduling, busy chips, logical ids, baselines (a source with its own tier)

Kept import-free: the child imports this package under whatever Python runs pyACL.
"""

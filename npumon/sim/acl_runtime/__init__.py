"""A package only so that setuptools installs acl.py with npumon. It is never imported as
npumon.sim.acl_runtime: this directory goes on a simulated probe child's PYTHONPATH, so that the child's
`import acl` finds acl.py here (the simulated pyACL) as it would find CANN's."""

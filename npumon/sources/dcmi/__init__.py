"""The DCMI backend: libdcmi.so through ctypes, in a worker process (see source.py)."""

"""The kernel log source: the Ascend driver's fault lines from /dev/kmsg (or a file of them)."""

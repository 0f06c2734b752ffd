"""What the diag child and `npumon diag` say to each other. Tiny on purpose: the child imports it.

The child announces every item on stderr before it starts (`npumon-diag: start ITEM`), so that when it is
killed at its deadline the parent knows which item never finished (an AI Core that never completes), and
prints one JSON object on stdout at the end: {"schema": SCHEMA, "device": N, "items": {ITEM: {...}}}.
"""

SCHEMA = "npumon.diag-child/v1"
ITEM_START = "npumon-diag: start "

# The items, in the order a child runs them. Level 2: the compute check, the copy bandwidths, the HBM
# pattern and a short MatMul; level 3 adds the sustained loads and the chip-to-chip copy.
COMPUTE = "compute"
H2D = "h2d"
D2H = "d2h"
HBM_PATTERN = "hbm_pattern"
MATMUL = "matmul"
HBM_SUSTAINED = "hbm_sustained"
MATMUL_SUSTAINED = "matmul_sustained"
P2P = "p2p"
LEVEL_ITEMS = {
    2: (COMPUTE, H2D, D2H, HBM_PATTERN, MATMUL),
    3: (COMPUTE, H2D, D2H, HBM_PATTERN, MATMUL, HBM_SUSTAINED, MATMUL_SUSTAINED, P2P),
}

# An item's outcome: it passed the child's own checks, it failed them (an ACL error, wrong data), or it could
# not run here (no MatMul operator, no peer chip) and says why.
OK = "ok"
FAILED = "failed"
UNAVAILABLE = "unavailable"

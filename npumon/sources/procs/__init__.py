"""The processes that hold the NPUs, as /proc shows them: their CPU time and whether they are stuck in D state."""

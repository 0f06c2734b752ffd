"""`python -m npumon.sim.dcmi`: build the simulated libdcmi.so if needed and print its path."""

import sys

from .build import main

sys.exit(main())

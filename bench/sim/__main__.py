"""`python -m bench.sim`: the fleet simulator as its own process (see bench/sim/fleet.py)."""

import sys

from bench.sim.fleet import main

if __name__ == "__main__":
    sys.exit(main())

"""Test and benchmark infrastructure, not part of the product path: the vLLM-like fleet simulator
(`fleet`, run standalone as `python -m bench.sim`), the simulator as its own process (`process`),
and a local Dagster deployment driven through the webserver's GraphQL API (`deployment`).

Tests may import this package and `bench.corpora`; nothing else under bench/."""

from bench.sim.fleet import FaultConfig, FleetSimulator, ReplicaSpec
from bench.sim.process import SimFleet

__all__ = ["FaultConfig", "FleetSimulator", "ReplicaSpec", "SimFleet"]

"""The header fleet: one request pool across many OpenAI-compatible replicas."""

from .config import FleetConfig, ReplicaConfig
from .pool import FleetRequest, FleetResult, HeaderFleet, get_fleet

__all__ = ["FleetConfig", "FleetRequest", "FleetResult", "HeaderFleet", "ReplicaConfig", "get_fleet"]

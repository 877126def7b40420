"""One tick of the real `new_documents` sensor evaluated in this process on a bench environment's
instance and store, its runs launched in process as the daemon would launch them (same tags)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from bench.fault_harness import Env


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class SensorTick:
    def __init__(self, env: Env):
        self.env = env
        self.skip_reason: str | None = None  # the last tick's, as the UI's tick history shows it

    def tick_and_launch(self) -> list[bool]:
        """Evaluate one tick, apply its partition requests, run its run requests: each run's success."""
        from contextual_assets.definitions import build_definitions
        from contextual_assets.defs.resources import build_resources
        from contextual_assets.settings import PlatformSettings

        self.env.prepare()
        with environment(self.env.environ()):
            settings = PlatformSettings.from_env()
            defs = build_definitions(settings)
            with dg.DagsterInstance.from_config(str(self.env.dagster_home)) as instance:
                with dg.build_sensor_context(instance=instance, definitions=defs,
                                             resources={"store": build_resources(settings)["store"]}) as context:
                    data = defs.resolve_sensor_def("new_documents").evaluate_tick(context)
                self.skip_reason = data.skip_message
                for request in data.dynamic_partitions_requests or []:
                    if isinstance(request, dg.AddDynamicPartitionsRequest):
                        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
                    else:
                        for key in request.partition_keys:
                            instance.delete_dynamic_partition(request.partitions_def_name, key)
                job = defs.resolve_job_def("ingest_documents")
                return [job.execute_in_process(
                    instance=instance, tags=request.tags, raise_on_error=False,
                    run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
                    **({"partition_key": request.partition_key} if request.partition_key else {})).success
                    for request in data.run_requests]

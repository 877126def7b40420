"""The `new_documents` sensor over an S3 inbox: a real S3 API server (moto's, on loopback), the real
sensor, store and Dagster instance, and a real ingest run that reads the object."""

from __future__ import annotations

import logging
import re

import pytest

from tests.integration.test_sensor import Clock, Harness
from tests.support import free_port

BUCKET = "ctx-inbox"


class S3:
    """A running S3 API (moto's threaded server), a client for it, and its request log."""

    def __init__(self, endpoint: str):
        import boto3

        self.endpoint = endpoint
        self.client = boto3.client("s3")
        self.requests: list[str] = []

    def put(self, key: str, body: bytes | str) -> str:
        data = body.encode() if isinstance(body, str) else body
        return self.client.put_object(Bucket=BUCKET, Key=key, Body=data)["ETag"].strip('"')

    def etag(self, key: str) -> str:
        return self.client.head_object(Bucket=BUCKET, Key=key)["ETag"].strip('"')

    def downloads(self, key: str) -> list[str]:
        """GET requests of the object itself (listings are GETs of the bucket)."""
        return [line for line in self.requests if f'"GET /{BUCKET}/{key} ' in line]


class _RequestLog(logging.Handler):
    def __init__(self, lines: list[str]):
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage()))  # without the terminal colours


@pytest.fixture
def s3(monkeypatch):
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # The standard AWS variables, as a deployment sets them (botocore and s3fs read them).
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    store = S3(endpoint)
    # moto keeps its buckets per process, not per server: start from none.
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).close()
    store.client.create_bucket(Bucket=BUCKET)
    werkzeug = logging.getLogger("werkzeug")
    handler = _RequestLog(store.requests)
    werkzeug.addHandler(handler)
    try:
        yield store
    finally:
        werkzeug.removeHandler(handler)
        server.stop()


def test_objects_are_added_changed_and_removed_by_their_etag(tmp_path, settings_factory, s3):
    a = s3.put("docs/a.md", "# A\n\nThe first memo.\n")
    s3.put("docs/team/b.txt", "Plain notes.\n")
    s3.put("other/c.md", "# Outside the prefix\n")
    s3.put("docs/.hidden.md", "# Hidden\n")
    s3.put("docs/folder/", b"")  # a "folder" marker object
    harness = Harness(settings_factory(inbox=f"s3://{BUCKET}/docs"), tmp_path / "dagster_home")
    store = harness.store_resource.open()

    first = harness.tick()
    assert harness.partitions() == {"a.md", "team/b.txt"}
    assert sorted(harness.requested(first)) == ["a.md", "team/b.txt"]
    source = store.corpus.get_source("a.md")
    assert source.path == f"s3://{BUCKET}/docs/a.md" and source.file_hash == f"etag:{a}"
    assert s3.downloads("docs/a.md") == [], "listed by ETag, never downloaded to hash"

    assert harness.tick().run_requests == []
    # Same bytes uploaded again: same ETag, nothing to do. New bytes: a new run for that document.
    s3.put("docs/a.md", "# A\n\nThe first memo.\n")
    assert harness.tick().run_requests == []
    changed = s3.put("docs/a.md", "# A\n\nThe first memo, amended.\n")
    modified = harness.tick()
    assert harness.requested(modified) == ["a.md"]
    assert modified.run_requests[0].run_key not in {r.run_key for r in first.run_requests}
    assert store.corpus.get_source("a.md").file_hash == f"etag:{changed}"

    s3.client.delete_object(Bucket=BUCKET, Key="docs/team/b.txt")
    removed = harness.tick()
    assert removed.run_requests == [] and harness.partitions() == {"a.md"}
    assert store.corpus.get_source("team/b.txt") is None
    assert s3.downloads("docs/a.md") == []


def test_oversize_wrong_type_and_half_written_objects(tmp_path, settings_factory, s3):
    s3.put("docs/ok.md", "# OK\n\nfine\n")
    s3.put("docs/huge.txt", "words " * 250_000)  # 1.5 MB
    s3.put("docs/photo.png", b"\x89PNG\r\n\x1a\n")
    upload = s3.client.create_multipart_upload(Bucket=BUCKET, Key="docs/partial.md")
    part = s3.client.upload_part(Bucket=BUCKET, Key="docs/partial.md", PartNumber=1, UploadId=upload["UploadId"],
                                 Body=b"# Partial\n\nthe whole text arrives in one part\n")
    clock = Clock()
    clock.now -= 100  # behind the S3 server's clock: every object counts as just written, so each one
    # is taken only once it has been listed unchanged for the settle delay
    harness = Harness(settings_factory(inbox=f"s3://{BUCKET}/docs", max_file_mb=1.0), tmp_path / "dagster_home",
                      settle_s=2.0, clock=clock)

    first = harness.tick()
    assert first.run_requests == [] and harness.partitions() == set(), "nothing has settled yet"
    assert len(harness.logged("photo.png: unsupported file type '.png'")) == 1, "refused by its type at once"
    assert not harness.logged("partial.md"), "an upload in progress is not an object yet"

    clock.advance(2.5)
    data = harness.tick()
    assert harness.partitions() == {"ok.md"} and harness.requested(data) == ["ok.md"]
    assert len(harness.logged("huge.txt: file is 1.5 MB, over the limit of 1.0 MB (CTX_MAX_FILE_MB)")) == 1
    assert s3.downloads("docs/huge.txt") == [] and s3.downloads("docs/ok.md") == []
    harness.tick()
    assert harness.logged("refused") == [], "each refusal is logged once"

    # The upload completes: the object appears, and waits out the delay before it is taken.
    s3.client.complete_multipart_upload(Bucket=BUCKET, Key="docs/partial.md", UploadId=upload["UploadId"],
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert harness.tick().run_requests == [] and "partial.md" not in harness.partitions()
    clock.advance(1.0)
    assert harness.tick().run_requests == []
    clock.advance(1.5)
    settled = harness.tick()
    assert harness.requested(settled) == ["partial.md"]
    assert harness.store_resource.open().corpus.get_source("partial.md").file_hash == f"etag:{s3.etag('docs/partial.md')}"


def test_an_s3_document_is_ingested_end_to_end(tmp_path, settings_factory, s3):
    etag = s3.put("docs/contract.md", "# Supply contract\n\n## Penalties\n\nLate delivery costs the supplier "
                                      "a quokkafine of two percent per week.\n")
    harness = Harness(settings_factory(inbox=f"s3://{BUCKET}/docs", max_file_mb=1.0), tmp_path / "dagster_home")
    [run] = harness.launch(harness.tick())
    assert run.success
    store = harness.store_resource.open()
    [document] = store.corpus.documents()
    assert document.doc_id == "contract.md" and document.source_path == f"s3://{BUCKET}/docs/contract.md"
    assert document.file_hash == f"etag:{etag}" == store.corpus.get_source("contract.md").file_hash
    assert store.corpus.count_chunks(doc_id="contract.md") > 0
    hits = store.search.lexical("quokkafine", document.index_version, 3)
    assert hits and hits[0].doc_id == "contract.md"
    assert len(s3.downloads("docs/contract.md")) == 1, "read once, by the run"

    # The run checks the size limit on the object's listing entry, before downloading it: a re-run of
    # the partition after the object grew past the limit fails with the reason and downloads nothing.
    s3.put("docs/contract.md", "words " * 250_000)
    job = harness.defs.resolve_job_def("ingest_documents")
    rerun = job.execute_in_process(instance=harness.instance, partition_key="contract.md", raise_on_error=False,
                                   run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
    assert not rerun.success
    failure = next(e for e in rerun.all_events if e.event_type_value == "STEP_FAILURE")
    assert "over the limit of 1.0 MB (CTX_MAX_FILE_MB)" in failure.step_failure_data.user_failure_data.description
    assert len(s3.downloads("docs/contract.md")) == 1
    assert store.corpus.count_chunks(doc_id="contract.md") > 0, "the stored revision stays"


def test_a_missing_bucket_or_an_unreachable_store_changes_nothing(tmp_path, settings_factory, s3, monkeypatch):
    missing = Harness(settings_factory(inbox="s3://no-such-bucket/docs"), tmp_path / "dagster_home_missing")
    data = missing.tick()
    assert data.skip_message.startswith("inbox s3://no-such-bucket/docs: bucket not found")
    assert data.skip_message.endswith("nothing changed") and "\n" not in data.skip_message

    s3.put("docs/a.md", "# A\n\ntext\n")
    settings = settings_factory(inbox=f"s3://{BUCKET}/docs", ingest_retries=1, ingest_retry_delay_s=0.0)
    harness = Harness(settings, tmp_path / "dagster_home")
    harness.tick()
    cursor = harness.cursor
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    down = harness.tick()
    assert "cannot be listed" in down.skip_message and "Could not connect" in down.skip_message
    assert harness.partitions() == {"a.md"} and harness.store_resource.open().corpus.get_source("a.md") is not None
    assert harness.cursor == cursor, "the cursor stays as it was"

    # A run that cannot reach the store fails with a retryable error: the step is retried.
    job = harness.defs.resolve_job_def("ingest_documents")
    outage = job.execute_in_process(instance=harness.instance, partition_key="a.md", raise_on_error=False,
                                    run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
    assert not outage.success
    assert len([e for e in outage.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]) == 1
    failure = [e for e in outage.all_events if e.event_type_value == "STEP_FAILURE"][-1]
    assert "the object store did not answer" in failure.step_failure_data.user_failure_data.description

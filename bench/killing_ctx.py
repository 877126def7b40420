"""`ctx` that SIGKILLs itself inside a multi-document commit: the fault bench's and the tests' way to land
a real kill at the one moment that cannot be hit from outside (after a store transaction of several
documents returned, before their run recorded them).

    KILL_AFTER_COMMIT_OF=3 python -m bench.killing_ctx ingest FILE...

The commit stage's first batch waits (at most 120 s) until that many documents are ready, so one
transaction holds them; the process kills itself as soon as a transaction of at least that many returns.
Everything else is the product, unchanged."""

from __future__ import annotations

import os
import signal
import sys
import time

from contextual_assets.cli.main import main
from contextual_assets.ingest.pipeline import commit_stage
from contextual_assets.store.corpus import CorpusTable

KILL_AFTER_COMMIT_OF = "KILL_AFTER_COMMIT_OF"


def install(batch: int) -> None:
    take_batch = commit_stage.take_batch
    replace_documents = CorpusTable.replace_documents

    def held_take_batch(queue, first, limit):
        deadline = time.monotonic() + 120
        while queue.qsize() < batch - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        return take_batch(queue, first, limit)

    def replace_then_die(self, documents, *args, **kwargs):
        replace_documents(self, documents, *args, **kwargs)
        if len(documents) >= batch:
            os.kill(os.getpid(), signal.SIGKILL)

    commit_stage.take_batch = held_take_batch
    CorpusTable.replace_documents = replace_then_die


if __name__ == "__main__":
    install(int(os.environ[KILL_AFTER_COMMIT_OF]))
    sys.exit(main(sys.argv[1:]))

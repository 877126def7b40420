"""`Recent`: what the search service reads per request (alias, settings' version, a version's chunk count
for readiness probes) is read again only when it is old."""

from contextual_assets.serving.recent import Recent


def test_a_recent_value_is_read_once_while_fresh_and_every_time_at_age_zero():
    reads: list[int] = []

    def read() -> int:
        reads.append(len(reads))
        return len(reads)

    fresh = Recent(read, max_age_s=3600.0)
    assert [fresh.get() for _ in range(5)] == [1, 1, 1, 1, 1]
    assert len(reads) == 1
    always = Recent(read, max_age_s=0.0)
    assert [always.get() for _ in range(3)] == [2, 3, 4]


def test_a_value_recent_does_not_keep_is_read_again():
    counts = iter([0, 0, 3, 4])
    chunks = Recent(lambda: next(counts), max_age_s=3600.0, keep=lambda n: n > 0)
    assert [chunks.get() for _ in range(4)] == [0, 0, 3, 3], "kept once non-zero"

"""Pulls in parts through the Python client: `client.pull_part_bytes` from the job's settings
reaches the C++ client (a large pull goes as several requests to each server) and delivers the rows
that pulls too small to be cut deliver, against real osprey-server processes."""
import numpy as np


def test_large_pulls_go_in_parts_and_deliver_the_small_pulls_rows(make_job):
    job = make_job(servers=2)
    client = job.connect(sets=["client.pull_part_bytes=1024"])
    try:
        emb = client.table("emb")
        keys = (np.arange(1, 3001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))[::-1].copy()
        # 100 keys of 16 bytes over 2 servers: under two parts of 1 KiB for each, so sent whole.
        small = np.concatenate([emb.pull(keys[i:i + 100]).wait().copy() for i in range(0, len(keys), 100)])
        before = client.stats()["requests"]
        big = emb.pull(keys).wait().copy()
        sent = client.stats()["requests"] - before
        assert sent > 2 * 2, f"a 48 KB pull from 2 servers went as {sent} requests, not in parts"
        np.testing.assert_array_equal(big, small)
    finally:
        client.close()

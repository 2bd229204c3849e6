"""The lease that keeps two runs out of one gs:// checkpoint folder, on a real Cloud Storage
API on loopback (gcp-storage-emulator).

The emulator does not enforce Cloud Storage's generation preconditions, so what two takers
racing for one lease would see is not exercised here; everything else is.
"""

from __future__ import annotations

import pytest

from llm_pipeline.train import lease


@pytest.fixture
def folder(gcs_bucket: str) -> str:
    return f"gs://{gcs_bucket}/checkpoints/run-0123456789ab"


def test_a_live_lease_refuses_a_second_run_naming_its_holder(folder: str) -> None:
    first = lease.acquire(folder, job="111")
    assert isinstance(first, lease.Lease)

    refused = lease.acquire(folder, job="222")

    assert isinstance(refused, str)
    assert f"pid {first.body['pid']} on host {first.body['host']}, Vertex job 111" in refused
    first.release()
    assert isinstance(lease.acquire(folder, job="222"), lease.Lease)


def test_an_expired_lease_or_one_of_the_same_job_is_taken_over(
    folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease, "TTL_S", -1.0)  # its holder died long ago
    dead = lease.acquire(folder, job=None)
    assert isinstance(dead, lease.Lease)
    monkeypatch.setattr(lease, "TTL_S", 600.0)

    taker = lease.acquire(folder, job="333")
    assert isinstance(taker, lease.Lease)
    assert not dead.renew(), "the dead holder's lease is gone"

    restarted = lease.acquire(folder, job="333")  # the same Vertex job, restarted
    assert isinstance(restarted, lease.Lease)
    assert not taker.renew()
    assert restarted.renew()
    assert isinstance(lease.acquire(folder, job=None), str)


@pytest.mark.parametrize(
    "body", [b'{"expires": "soon"', b'{"expires": "soon"}', b'{"expires": Infinity}', b"[1]", b"{}"]
)
def test_a_lease_that_is_not_one_is_taken_over_and_said_so(
    folder: str, body: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every lease is written whole in one request, so a damaged or hand-edited one names no
    holder to wait for: the next run takes it over, saying so, instead of failing."""
    fs, root = lease.url_to_fs(folder)
    fs.pipe_file(f"{root}/{lease.LEASE}", body)

    taken = lease.acquire(folder, job="444")

    assert isinstance(taken, lease.Lease)
    assert f"{folder}/LEASE.json is not a lease this code wrote; taking it over" in (
        capsys.readouterr().out
    )
    assert isinstance(lease.acquire(folder, job="555"), str), "and it now holds the folder"

"""A PostgreSQL server restarted in the middle of a search: the storage calls wait it out
(search/retry.py), saying so, and every trial is stored; a refusal that waiting cannot mend is the
server's own reason, exit 2.
The server is a real one (pgserver's PostgreSQL binaries), on a unix socket of its own."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import run_cli, start_cli, tiny, wait_until

pgserver = pytest.importorskip("pgserver")
pytest.importorskip("psycopg")


@pytest.fixture
def server(tmp_path: Path):
    srv = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    yield srv
    srv.cleanup()


def _restart(srv, down_s: float) -> None:
    """Stop the server (pg_ctl's fast shutdown: sessions dropped), wait, start it again with the
    options it ran with (PostgreSQL's own postmaster.opts, as `pg_ctl restart` reads them)."""
    opts = shlex.split((Path(srv.pgdata) / "postmaster.opts").read_text())[1:]
    opts = [o for i, o in enumerate(opts) if o != "-D" and (i == 0 or opts[i - 1] != "-D")]
    pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=srv.pgdata, user=srv.system_user)
    time.sleep(down_s)
    pgserver.pg_ctl(
        ["-w", "-o", shlex.join(opts), "start"], pgdata=srv.pgdata, user=srv.system_user
    )


@pytest.mark.slow
def test_storage_retry_a_restarted_server_loses_no_trial(server, tmp_path: Path) -> None:
    url = server.get_uri().replace("postgresql://", "postgresql+psycopg://")
    doc = tiny(
        space={"micro_batch_size": [2, 4, 8], "precision": "fp32"},
        study={"trials": 3, "confirm_top": 0},
    )
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    proc = start_cli(
        "search",
        str(path),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--storage",
        url,
        cwd=tmp_path,
        env={"AUTOTUNE_FAULT": "slow:2000@micro_batch_size=4"},
    )
    wait_until(
        lambda: (out / "t" / "runs" / "0001" / "spec.json").exists(), 120, "the second trial"
    )
    _restart(server, 12)  # longer than a heartbeat interval (10 s): a call meets it
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    # the outage met a storage call
    assert "storage unreachable" in err and "retrying for up to" in err
    trials = optuna.load_study(study_name="t", storage=url).get_trials()
    assert len([t for t in trials if t.state.name == "COMPLETE"]) == 3, [
        t.user_attrs.get("status") for t in trials
    ]


@pytest.mark.slow
def test_storage_retry_a_wrong_database_is_the_servers_own_reason(server, tmp_path: Path) -> None:
    url = (
        server.get_uri()
        .replace("postgresql://", "postgresql+psycopg://")
        .replace("/postgres?", "/nodb?")
    )
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(tiny(study={"trials": 1})))
    # timeout: a hang guard; waiting out the retries (120 s) would outlast it
    proc = run_cli(
        "search",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        "--storage",
        url,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2 and 'database "nodb" does not exist' in proc.stderr, proc.stderr
    assert "retrying" not in proc.stderr  # not a wait: a refusal

"""A run writes only inside its run dir, a checkpoint names only its own files, and ``lmgym view
--serve`` serves the report alone (the red-team round against run dirs and the report server)."""

import http.client
import json
import shutil
import threading

import pytest
import torch
from test_train_cli import SMOKE_ARGS, lmgym, smoke_run  # noqa: F401 (the module's trained run)

from lmgym.agents import checkpoints
from lmgym.agents.metrics import MetricsLogger
from lmgym.agents.plotting import plot_learning_curve
from lmgym.agents.recording import append_records
from lmgym.cli.rundir import claim_run_dir
from lmgym.cli.spec import RunSpec
from lmgym.report import MAX_EPISODES, ReportServer, build_report
from lmgym.storage import write_aside

pytestmark = pytest.mark.timeout(1800)


def outside_file(tmp_path, name):
    victim = tmp_path / "elsewhere" / name
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("do not touch")
    return victim


def test_every_writer_replaces_a_link_instead_of_following_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    victims = {name: outside_file(tmp_path, name) for name in ("config.json", "metrics.csv", "curve.png", "x.md")}
    for name, victim in victims.items():
        (run / name).symlink_to(victim)
    logger = MetricsLogger(run, {"learning_rate": 0.1})
    logger.log({"env/return": 1.0, "env/success": 1.0}, 1)
    logger.close()
    plot_learning_curve(run / "metrics.csv", run / "curve.png")
    write_aside(run / "x.md", "new")
    for name, victim in victims.items():
        assert victim.read_text() == "do not touch" and not (run / name).is_symlink(), name
    assert json.loads((run / "config.json").read_text()) == {"learning_rate": 0.1}
    (run / "episodes.jsonl").symlink_to(outside_file(tmp_path, "episodes.jsonl"))
    with pytest.raises(OSError):  # an append would write through the link: refused instead
        append_records(run / "episodes.jsonl", [{"update": 0}])


@pytest.mark.slow
def test_resume_refuses_a_run_dir_entry_that_links_outside(smoke_run, tmp_path):  # noqa: F811
    out, _ = smoke_run
    run = tmp_path / "run"
    shutil.copytree(out, run, symlinks=True)
    victim = outside_file(tmp_path, "summary.json")
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(victim)
    result = lmgym("train", *SMOKE_ARGS, "--episodes", "24", "--out", str(run), "--resume", str(run))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"lmgym train: error: --out {str(run)!r}: summary.json is a link to {str(victim)!r}, outside the run dir: "
        "refused (a run writes only inside its run dir)"
    ]
    assert victim.read_text() == "do not touch"


def test_overwrite_checks_first_and_removes_links_as_links(tmp_path):
    run, keep = tmp_path / "run", tmp_path / "kept-checkpoints"
    (keep / "update-000001").mkdir(parents=True)
    (run / "model").mkdir(parents=True)
    (run / "warmstart").mkdir()
    (run / "checkpoints").symlink_to(keep, target_is_directory=True)
    lock = claim_run_dir(RunSpec("train", "lmgym/Echo-v0", out=run, overwrite=True))
    lock.close()
    assert sorted(p.name for p in run.iterdir()) == [".lmgym.lock"]
    assert (keep / "update-000001").is_dir()  # the link went, not what it pointed at


@pytest.mark.parametrize("name", ["../../../etc/passwd", "/etc/passwd", "link/escape", ""])
def test_a_manifest_names_only_files_of_its_checkpoint(tmp_path, name):
    ckpt = tmp_path / "checkpoints" / "update-000001"
    ckpt.mkdir(parents=True)
    torch.save({"a": 1}, ckpt / "training_state.pt")
    (ckpt / "link").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "escape").write_text("secret")
    files = {name: {"bytes": 6, "sha256": checkpoints.sha256(tmp_path / "escape")}}
    (ckpt / checkpoints.CHECKPOINT_MANIFEST).write_text(json.dumps({"files": files}))
    with pytest.raises(checkpoints.CheckpointError, match="which is not a file of it|a link out of the checkpoint"):
        checkpoints.verify(ckpt)


def request(server, path, host=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{server.server_address[1]}"})
    response = conn.getresponse()
    return response.status, response.read()


@pytest.fixture
def served(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("step,env/return\n1,0.5\n")
    (run / "model").mkdir()
    (run / "model" / "config.json").write_text("{}")
    (run / "passwd_link").symlink_to("/etc/passwd")
    report, _ = build_report(run)
    server = ReportServer(report, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, report
    server.shutdown()
    server.server_close()


def test_serve_answers_the_report_alone(served):
    server, report = served
    page = report.read_bytes()
    assert request(server, "/report.html") == (200, page) and request(server, "/") == (200, page)
    for path in ("/passwd_link", "/metrics.csv", "/model/config.json", "/model/", "/../../etc/passwd", "/%2e%2e/"):
        assert request(server, path)[0] == 404, path
    port = server.server_address[1]
    assert request(server, "/report.html", host=f"localhost:{port}")[0] == 200
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"):
        assert request(server, "/report.html", host=host)[0] == 421  # DNS rebinding: another Host


def test_view_reads_a_bounded_number_of_episodes(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    record = {"kind": "train", "text": ["x" * 50], "mask": [0]}
    with open(run / "episodes.jsonl", "w") as f:
        for update in range(300):
            for i in range(16):
                f.write(json.dumps({"update": update, **record, "seed": i}) + "\n")
    report, skipped = build_report(run)
    data = json.loads(report.read_text().split("const DATA = ", 1)[1].split(";\n", 1)[0])
    kept = data["episodes"]
    assert len(kept) <= MAX_EPISODES and {e["update"] for e in kept} >= {0, 299}
    assert sum(e["update"] == 299 for e in kept) == 16  # the newest update whole
    assert any(f"{300 * 16 - len(kept)} of {300 * 16} episodes" in s for s in skipped)

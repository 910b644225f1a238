"""compose.yaml, the Dockerfile and the Procfile, checked without a container engine.

compose.yaml is interpolated as compose does (`${VAR:-default}`, nested, `$$`), then
validated against the compose-spec JSON schema that check-jsonschema ships, then
checked for what the schema cannot say: the start order, the restart policies, the
healthcheck, the standby replica, the commands and the documented variables.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"
SNIPPETS = ROOT / "README.md"
DAEMONS = ("scheduler", "runner")


# --- compose's interpolation --------------------------------------------------------

def interpolate(text: str, env: dict[str, str]) -> str:
    """${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:+a}, ${VAR+a}, $VAR and $$, defaults nested."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "$":
            out.append(c)
            i += 1
        elif text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                if text.startswith("$$", j):
                    j += 2
                    continue
                if text.startswith("${", j):
                    depth += 1
                    j += 2
                    continue
                if j >= len(text):
                    raise ValueError(f"unclosed ${{ in {text!r}")
                depth -= text[j] == "}"
                j += 1
            body = text[i + 2 : j - 1]
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+?])(.*))?", body, re.S)
            assert m, f"bad substitution ${{{body}}}"
            name, op, arg = m.group(1), m.group(2), m.group(3) or ""
            value = env.get(name)
            if op in (":-", "-"):
                unset = value is None or (op == ":-" and value == "")
                out.append(interpolate(arg, env) if unset else value)
            elif op in (":+", "+"):
                present = value is not None and (op == "+" or value != "")
                out.append(interpolate(arg, env) if present else "")
            else:
                out.append(value or "")
            i = j
        else:
            m = re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)", text[i:])
            assert m, f"a lone $ in {text!r}: write $$"
            out.append(env.get(m.group(1), ""))
            i += len(m.group(0))
    return "".join(out)


def variables_used(text: str) -> set[str]:
    """Variables compose interpolates (not the $$-escaped ones the container shell sees)."""
    unescaped = text.replace("$$", "")
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", unescaped))


def shell_variables(text: str) -> set[str]:
    """Variables left for the container's shell ($$VAR in compose.yaml)."""
    return set(re.findall(r"\$\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))


def load(env: dict[str, str] | None = None) -> dict:
    raw = yaml.safe_load(COMPOSE.read_text())

    def walk(v):
        if isinstance(v, str):
            return interpolate(v, env or {})
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(raw)


@pytest.fixture(scope="module")
def compose() -> dict:
    return load()


@pytest.fixture(scope="module")
def schema() -> dict:
    try:
        vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    except ModuleNotFoundError:
        pytest.skip("check-jsonschema (which ships compose-spec.json) is not installed")
    return json.loads((vendor / "compose-spec.json").read_text())


def errors_of(doc: dict, schema: dict) -> list[str]:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in cls(schema).iter_errors(doc)]


# --- the schema ---------------------------------------------------------------------

def test_valid_against_the_compose_spec(compose, schema):
    assert errors_of(compose, schema) == []


def test_the_schema_check_catches_mistakes(compose, schema):
    for mutate in (lambda d: d["services"]["scheduler"].update(restrat="always"),
                   lambda d: d["services"]["postgres"]["healthcheck"].update(interval=5),
                   lambda d: d["services"]["migrate"].update(depends_on=[{"postgres": "healthy"}])):
        doc = copy.deepcopy(compose)
        mutate(doc)
        assert errors_of(doc, schema), "an invalid compose file passed the schema"


def test_valid_with_the_variables_overridden(schema):
    env = {"SCRINALIA_SCHEDULER_REPLICAS": "3", "SCRINALIA_DATABASE_URL": "postgresql://a@b/c",
           "SCRINALIA_RUNNER_HANDLERS": "my.handlers"}
    doc = load(env)
    assert errors_of(doc, schema) == []
    assert doc["services"]["scheduler"]["deploy"]["replicas"] == "3"
    assert doc["services"]["scheduler"]["environment"]["DATABASE_URL"] == "postgresql://a@b/c"
    assert doc["services"]["runner"]["environment"]["SCRINALIA_RUNNER_HANDLERS"] == "my.handlers"


def test_interpolation_like_compose():
    env = {"A": "1", "E": ""}
    assert interpolate("${A:-x}/${B:-x}/${E:-x}/${E-x}/${B:-${A}}/$$A/${A:+y}/${E:+y}", env) == "1/x/x//1/$A/y/"


# --- what the schema cannot say -------------------------------------------------------

def test_services_and_start_order(compose):
    s = compose["services"]
    assert set(s) == {"postgres", "migrate", "scheduler", "runner"}
    for name, svc in s.items():
        for target, cond in (svc.get("depends_on") or {}).items():
            assert target in s, f"{name} depends on a missing service {target}"
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in s[target], f"{name} waits for {target}'s health, which has no check"
    assert s["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for d in DAEMONS:
        assert s[d]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}


def test_postgres_is_healthchecked_on_a_named_volume(compose):
    pg = compose["services"]["postgres"]
    assert pg["image"] == "postgres:16"
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    mounts = [v.split(":")[0] for v in pg["volumes"]]
    assert mounts and all(m in compose["volumes"] for m in mounts)
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])


def test_restart_policies_and_the_standby_replica(compose):
    s = compose["services"]
    assert s["migrate"]["restart"] == "no"  # one-shot: a restart loop would hide a failed migrate
    for d in DAEMONS:
        assert s[d]["restart"] == "always"
    assert int(s["scheduler"]["deploy"]["replicas"]) >= 2  # the second waits in standby


def test_commands_are_declared_console_scripts(compose):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    expected = {"migrate": "scrinalia-workers", "scheduler": "scrinalia-scheduler", "runner": "scrinalia-runner"}
    for name, script in expected.items():
        cmd = " ".join(compose["services"][name]["command"])
        assert re.search(rf"(^|exec ){script}\b", cmd), cmd
        assert script in scripts
    assert compose["services"]["migrate"]["command"] == ["scrinalia-workers", "migrate"]


def _flags(compose: dict, service: str) -> set[str]:
    return set(re.findall(r"(--[a-z][a-z-]*)", " ".join(compose["services"][service]["command"])))


@pytest.mark.parametrize("service", DAEMONS)
def test_daemon_flags_exist(compose, service):
    module = f"scrinalia_workers.{service}"
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not written yet")
    help_text = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    missing = sorted(f for f in _flags(compose, service) if f not in help_text)
    assert not missing, f"{service} has no option {missing}"


def test_migrate_command_works_as_written(compose):
    r = subprocess.run([sys.executable, "-m", "scrinalia_workers", *compose["services"]["migrate"]["command"][1:],
                        "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--rollback" in r.stdout


def test_every_variable_is_documented():
    documented = set(re.findall(r"^\| `([A-Z_][A-Z0-9_]*)` \|", SNIPPETS.read_text(), re.M))
    text = COMPOSE.read_text()
    procfile = (ROOT / "Procfile").read_text()
    used = variables_used(text) | shell_variables(text) | variables_used(procfile)
    # POSTGRES_* inside the healthcheck are the postgres container's own variables
    assert used - documented == set(), "variables used but not in README.md"
    assert {v for v in documented if v.startswith("SCRINALIA_")} - used - {"SCRINALIA_ROOT"} == set(), \
        "documented variables that nothing uses"


def test_each_process_gets_a_database_url(compose):
    for name in ("migrate", *DAEMONS):
        assert compose["services"][name]["environment"]["DATABASE_URL"].startswith("postgresql://")
    assert compose["services"]["migrate"]["environment"]["DATABASE_URL"] == \
        "postgresql://scrinalia:scrinalia@postgres:5432/scrinalia"


# --- the Dockerfile and the Procfile ----------------------------------------------------

def test_dockerfile_builds_what_compose_runs(compose):
    dockerfile = (ROOT / "Dockerfile").read_text()
    for name in ("migrate", *DAEMONS):
        build = compose["services"][name]["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).resolve() == ROOT / "Dockerfile"
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r"^RUN pip install \.", dockerfile, re.M)
    copied = set(re.findall(r"^COPY (\S+)", dockerfile, re.M))
    assert {"migrations", "sql", "py_shim", "pyproject.toml"} <= copied
    for path in copied:
        assert (ROOT / path).exists(), f"the Dockerfile copies a missing {path}"
    # a non-editable install finds sql/ and migrations/ only through SCRINALIA_ROOT
    assert re.search(r"SCRINALIA_ROOT=/app\b", dockerfile) and re.search(r"^WORKDIR /app$", dockerfile, re.M)


def test_procfile():
    types = dict(re.findall(r"^([a-z]+): (.+)$", (ROOT / "Procfile").read_text(), re.M))
    assert set(types) == {"release", "migrate", "scheduler", "runner"}
    assert types["release"] == "scrinalia-workers migrate"  # release phase: once per deploy, before the daemons
    assert types["migrate"] == "scrinalia-workers migrate"  # the same, as a one-off process type
    assert types["scheduler"].startswith("scrinalia-scheduler ")
    assert types["runner"].startswith("scrinalia-runner ")


def _argv(shell_command: str, program: str, env: dict[str, str]) -> list[str]:
    """The argv a `sh -c` command line execs, with the program replaced by a printer."""
    probe = shell_command.replace(f"exec {program}", f"printf '%s\\n' {program}", 1)
    assert probe != shell_command
    return subprocess.run(["sh", "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_daemon_commands_expand_in_the_container_shell(compose):
    sched = compose["services"]["scheduler"]
    assert sched["command"][:2] == ["sh", "-c"]
    assert _argv(sched["command"][2], "scrinalia-scheduler", sched["environment"]) == [
        "scrinalia-scheduler", "--json", "--standby-retry", "3", "--max-sleep", "5", "--log-level", "INFO"]
    runner = compose["services"]["runner"]
    assert _argv(runner["command"][2], "scrinalia-runner", runner["environment"]) == [
        "scrinalia-runner", "--json", "--lease", "30"]  # no handlers named: the runner's default
    with_handlers = {**runner["environment"], "SCRINALIA_RUNNER_HANDLERS": "my.handlers"}
    assert _argv(runner["command"][2], "scrinalia-runner", with_handlers)[-2:] == ["--handlers", "my.handlers"]


def test_procfile_commands_expand_like_compose():
    types = dict(re.findall(r"^([a-z]+): (.+)$", (ROOT / "Procfile").read_text(), re.M))
    assert _argv("exec " + types["scheduler"], "scrinalia-scheduler", {}) == [
        "scrinalia-scheduler", "--json", "--standby-retry", "3", "--max-sleep", "5"]
    assert _argv("exec " + types["runner"], "scrinalia-runner", {"SCRINALIA_RUNNER_HANDLERS": "my.h"}) == [
        "scrinalia-runner", "--json", "--lease", "30", "--handlers", "my.h"]

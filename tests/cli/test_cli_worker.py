"""scrinalia-workers worker register|list|show: the catalogue from a file, without psql."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import yaml

from helpers import assert_one_line_error, cli, make_worker

OCR = {
    "name": "ocr",
    "description": "OCR of scanned pages",
    "engines": {"tesseract": {"engine_options": {"psm": {"type": "integer"}}}},
    "presets": {"fast": {"options": {"dpi": 150}}},
    "options": {"dpi": {"type": "integer"}, "lang": {"type": "string", "values": ["por", "eng"]}},
    "default_config": {"engine": "tesseract", "options": {"dpi": 300, "lang": "por"}},
}
THUMBS = {"name": "thumbnails", "options": {"size": {"type": "integer", "values": [128, 256]}}}

YAML_FILE = """\
workers:
  - name: ocr
    description: OCR of scanned pages
    engines: {tesseract: {engine_options: {psm: {type: integer}}}}
    presets: {fast: {options: {dpi: 150}}}
    options:
      dpi: {type: integer}
      lang: {type: string, values: [por, eng]}
    default_config: {engine: tesseract, options: {dpi: 300, lang: por}}
  - name: thumbnails
    options: {size: {type: integer, values: [128, 256]}}
"""


def catalogue(db) -> dict:
    return {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT worker_name, description, engines, presets, options, default_config"
            " FROM scrinalia.archive_workers ORDER BY 1"
        ).fetchall()
    }


def write(tmp_path: Path, name: str, content) -> str:
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(p)


def test_register_a_yaml_file_then_list_and_show(db_dsn, db, tmp_path):
    f = write(tmp_path, "workers.yaml", YAML_FILE)
    r = cli("worker", "register", f, "--dsn", db_dsn)
    assert r.code == 0, r.err
    assert r.out.strip() == f"registered 2 worker(s) from {f}: ocr (new), thumbnails (new)"
    got = catalogue(db)
    assert got["ocr"] == (OCR["description"], OCR["engines"], OCR["presets"], OCR["options"], OCR["default_config"])
    assert got["thumbnails"] == ("", {}, {}, THUMBS["options"], {})
    # the catalogue works as registered: a request is validated against it
    db.execute('SELECT scrinalia.enqueue(\'ocr\', \'{"preset": "fast", "options": {"lang": "eng"}}\', \'CLI\')')

    listed = cli("worker", "list", "--dsn", db_dsn)
    assert listed.code == 0, listed.err
    line = next(ln for ln in listed.out.splitlines() if ln.startswith("ocr "))
    assert "tesseract" in line and "fast" in line and "dpi, lang" in line
    shown = json.loads(cli("--json", "worker", "show", "ocr", "--dsn", db_dsn).out)
    assert shown["options"] == OCR["options"] and shown["default_config"] == OCR["default_config"]
    text = cli("worker", "show", "thumbnails", "--dsn", db_dsn).out
    assert '{"size": {"type": "integer", "values": [128, 256]}}' in text
    # every run's limit: the default until the owner gives the worker its own
    assert "max run time  1h00m00s (the default;" in text or "1h00m00s (the default;" in text
    db.execute("SELECT scrinalia.set_max_run_time('thumbnails', '90 seconds')")
    text = cli("worker", "show", "thumbnails", "--dsn", db_dsn).out
    assert "1m30s (this worker's own: scrinalia.set_max_run_time;" in text
    assert (
        json.loads(cli("--json", "worker", "show", "thumbnails", "--dsn", db_dsn).out)["max_run_time_is_default"]
        is False
    )
    assert_one_line_error(cli("worker", "show", "nope", "--dsn", db_dsn), 1, "[SW001]", "unknown worker 'nope'")


def test_register_again_updates_and_is_idempotent(db_dsn, db, tmp_path):
    f = write(tmp_path, "w.json", {"workers": [OCR]})
    assert cli("worker", "register", f, "--dsn", db_dsn).code == 0
    changed = dict(OCR, description="v2", presets={})
    changed["default_config"] = {"engine": "tesseract"}
    r = cli("worker", "register", write(tmp_path, "w2.json", [changed]), "--dsn", db_dsn, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["registered"] == [{"worker": "ocr", "new": False}]
    assert catalogue(db)["ocr"][:3] == ("v2", OCR["engines"], {})


def test_a_single_worker_object(db_dsn, db, tmp_path):
    assert cli("worker", "register", write(tmp_path, "one.json", THUMBS), "--dsn", db_dsn).code == 0
    assert list(catalogue(db)) == ["thumbnails"]


def test_check_needs_no_database(tmp_path):
    r = cli("worker", "register", "--check", write(tmp_path, "w.yml", YAML_FILE))
    assert r.code == 0, r.err
    assert "2 worker(s) valid: ocr, thumbnails" in r.out


def _bad(worker_patch: dict | None = None, drop: str | None = None, extra_workers=()) -> dict:
    w = json.loads(json.dumps(OCR))
    if drop:
        del w[drop]
    for path, value in (worker_patch or {}).items():
        target = w
        *parents, last = path.split(".")
        for k in parents:
            target = target[k]
        target[last] = value
    return {"workers": [THUMBS, w, *extra_workers]}


@pytest.mark.parametrize(
    "doc, fragment",
    [
        (_bad({"name": "OCR"}), 'workers[1].name: invalid worker name "OCR"'),
        (_bad({"name": "x" * 64}), "workers[1].name: invalid worker name"),
        (_bad(drop="name"), "workers[1].name: invalid worker name null"),
        (_bad({"nmae": "ocr"}), "workers[1] (ocr): unknown key 'nmae'"),
        (_bad({"description": 5}), "workers[1] (ocr).description: must be a string, got a number"),
        (_bad({"options": []}), "workers[1] (ocr).options: must be an object, got a list"),
        (
            _bad({"options.dpi.type": "int"}),
            'workers[1] (ocr).options.dpi.type: must be one of integer, number, string, boolean, got "int"',
        ),
        (_bad({"options.lang.values": ["por", 3]}), "options.lang.values[1]: must be a string, got a number"),
        (_bad({"options.dpi.default": 3}), "options.dpi: unknown key 'default'"),
        (_bad({"engines.tesseract": {"options": {}}}), "engines.tesseract: unknown key 'options'"),
        (_bad({"presets.fast.options": {"dpi": "high"}}), "presets.fast.options.dpi: must be an integer, got a string"),
        (_bad({"presets.fast.options": {"colour": 1}}), "presets.fast.options: unknown option 'colour'"),
        (
            _bad({"default_config.engine": "abbyy"}),
            'default_config.engine: unknown engine "abbyy" (engines: tesseract)',
        ),
        (_bad({"default_config.preset": "slow"}), 'default_config.preset: unknown preset "slow"'),
        (
            _bad({"default_config.options": {"lang": "deu"}}),
            'default_config.options.lang: must be one of ["por", "eng"]',
        ),
        (
            _bad({"default_config.engine_options": {"psm": 1.5}}),
            "default_config.engine_options.psm: must be an integer",
        ),
        (_bad(extra_workers=[dict(THUMBS)]), "workers[2]: worker 'thumbnails' is also workers[0]"),
        ({"workers": []}, "got an empty list"),
        ({"workers": [THUMBS], "more": 1}, "unknown key 'more'"),
        ("[1, 2", "not valid JSON"),
        (42, "expected a worker, a list of workers"),
    ],
)
def test_a_bad_file_is_refused_whole_naming_the_part(db_dsn, db, tmp_path, doc, fragment):
    f = write(tmp_path, "workers.json", doc if isinstance(doc, str) else json.dumps(doc))
    assert_one_line_error(cli("worker", "register", f, "--dsn", db_dsn), 1, f"{f}: ", fragment)
    assert catalogue(db) == {}  # all or nothing: not even the valid first worker


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("workers:\n  - name: ocr\n    options: {dpi: {type: integer}\n", "not valid YAML"),
        (
            "workers:\n  - name: ocr\n    description: 2024-01-01\n",
            "workers[0].description: date is not a JSON value (quote it in YAML)",
        ),
        ("workers:\n  - name: ocr\n    options: {1: {type: integer}}\n", "key 1 must be a string"),
        ("workers:\n  - name: ocr\n    options: {x: {type: number, values: [.nan]}}\n", "is not a JSON number"),
    ],
)
def test_yaml_pitfalls_are_named(tmp_path, text, fragment):
    f = write(tmp_path, "w.yaml", text)
    assert_one_line_error(cli("worker", "register", "--check", f), 1, fragment)


def test_unreadable_files(tmp_path):
    assert_one_line_error(
        cli("worker", "register", "--check", str(tmp_path / "missing.yaml")),
        1,
        "missing.yaml: cannot read it: No such file or directory",
    )
    binary = tmp_path / "w.json"
    binary.write_bytes(b"\xff\xfe\x00")
    assert_one_line_error(cli("worker", "register", "--check", str(binary)), 1, "w.json: not UTF-8 text")


def test_a_database_refusal_rolls_back_the_whole_file(db_dsn, db, tmp_path):
    # one worker's name is taken by a row the table refuses to update: the file is undone
    db.execute("""CREATE FUNCTION scrinalia_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                  BEGIN IF NEW.worker_name = 'ocr' THEN RAISE EXCEPTION 'refused by a test trigger'; END IF;
                  RETURN NEW; END $$""")
    db.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON scrinalia.archive_workers FOR EACH ROW"
        " EXECUTE FUNCTION scrinalia_test_refuse()"
    )
    f = write(tmp_path, "w.json", [THUMBS, OCR])
    assert_one_line_error(
        cli("worker", "register", f, "--dsn", db_dsn), 1, f"{f}: worker 'ocr'", "refused by a test trigger"
    )
    assert catalogue(db) == {}


def test_the_catalogue_is_written_by_the_owner_and_read_by_every_group(db_dsn, db, tmp_path, role_logins):
    f = write(tmp_path, "w.json", [THUMBS])
    for group in ("operator", "reader", "runner", "scheduler"):
        login = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins[group])
        assert_one_line_error(cli("worker", "register", f, "--dsn", login), 1, "[42501]", "the login that migrates")
    assert catalogue(db) == {}
    assert cli("worker", "register", f, "--dsn", db_dsn).code == 0
    for group in ("operator", "reader"):
        login = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins[group])
        listed = cli("worker", "list", "--json", "--dsn", login)
        assert listed.code == 0, listed.err
        assert [w["worker_name"] for w in json.loads(listed.out)] == [THUMBS["name"]]
        shown = cli("worker", "show", THUMBS["name"], "--json", "--dsn", login)
        assert shown.code == 0, shown.err
        assert json.loads(shown.out)["presets"] == THUMBS.get("presets", {})


def test_the_readme_example_file_registers(db_dsn, db, tmp_path):
    """The README's example catalogue file is valid as written."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = text.split("```yaml\n# workers.yaml", 1)[1].split("```", 1)[0]
    f = write(tmp_path, "workers.yaml", "# workers.yaml" + block)
    r = cli("worker", "register", f, "--dsn", db_dsn)
    assert r.code == 0, r.err
    assert yaml.safe_load(block)["workers"][0]["name"] in catalogue(db)


def test_register_from_stdin(db_dsn, db):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    p = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers", "worker", "register", "-", "--dsn", db_dsn],
        input=YAML_FILE,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "from <stdin>: ocr (new), thumbnails (new)" in p.stdout
    assert list(catalogue(db)) == ["ocr", "thumbnails"]


def test_the_readme_schedule_file_imports_and_prints_what_the_readme_shows(db_dsn, db, tmp_path):
    """The README's schedule file is valid as written, and each command of its console
    block prints exactly the line the README shows after it."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = text.split("```yaml\n# schedules.yaml\n", 1)[1].split("```", 1)[0]
    console = text.split("```console\n$ scrinalia-workers schedule import", 1)[1].split("```", 1)[0]
    make_worker(db, "ocr")
    make_worker(db, "thumbnails")
    (tmp_path / "schedules.yaml").write_text(block)
    lines = ("$ scrinalia-workers schedule import" + console).strip().splitlines()
    pairs = [(lines[i], lines[i + 1]) for i in range(0, len(lines), 2)]
    assert len(pairs) == 2
    for command, shown in pairs:
        argv = command.removeprefix("$ scrinalia-workers ").split()
        r = subprocess.run(
            [sys.executable, "-m", "scrinalia_workers", *argv, "--dsn", db_dsn],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == shown, (command, r.stdout)
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_schedules").fetchone()[0] == 2

"""demo and demo-seed: the narrated demo, and its workers for compose's demo profile.

The demo package is imported only when one of these runs: the CLI does not carry it."""

from __future__ import annotations

import argparse

from scrinalia_workers.cli.common import EXIT_OK, open_db
from scrinalia_workers.presentation.fmt import print_json


def cmd_demo(args: argparse.Namespace) -> int:
    from scrinalia_workers.demo.narrate import run

    return run(duration=args.duration, dsn=args.dsn)


def cmd_seed(args: argparse.Namespace) -> int:
    from scrinalia_workers.demo.setup import seed

    with open_db(args) as conn:
        done = seed(conn)
    if args.json:
        print_json([{"worker": w, "cron": c, "schedule_changed": ch} for w, c, _, ch in done])
        return EXIT_OK
    for w, c, what, changed in done:
        print(f"{w:<16} {c:<12} {'scheduled' if changed else 'already scheduled'}: {what}")
    return EXIT_OK

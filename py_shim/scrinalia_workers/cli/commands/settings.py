"""settings put: a worker's persisted settings (the operator's; the catalogue is the owner's)."""

from __future__ import annotations

import argparse
import json

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from scrinalia_workers.cli.common import EXIT_OK, one, open_db, parse_json_object, who
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.presentation.fmt import print_json


def cmd_put(args: argparse.Namespace) -> int:
    settings = parse_json_object(args.settings, "--settings")
    with open_db(args) as conn:
        r = one(conn.cursor(row_factory=dict_row).execute(sql.PUT_SETTINGS, (args.worker, Jsonb(settings), who())))
    if args.json:
        print_json(r)
    else:
        print(f"settings of {r['worker_name']} saved: {json.dumps(r['settings'], ensure_ascii=False)}")
    return EXIT_OK

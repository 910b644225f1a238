"""python -m scrinalia_workers: the scrinalia-workers command line."""

import sys

from scrinalia_workers.cli.app import main

sys.exit(main())

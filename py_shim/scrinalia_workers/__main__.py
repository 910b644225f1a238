"""python -m scrinalia_workers: the scrinalia-workers command line."""

import sys

from .cli import main

sys.exit(main())

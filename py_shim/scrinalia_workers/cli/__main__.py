"""python -m scrinalia_workers.cli"""

import sys

from scrinalia_workers.cli.app import main

sys.exit(main())

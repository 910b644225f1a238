"""python -m scrinalia_workers.runner"""

import sys

from scrinalia_workers.runner.command import main

sys.exit(main())

"""python -m scrinalia_workers.scheduler"""

import sys

from scrinalia_workers.scheduler.command import main

sys.exit(main())

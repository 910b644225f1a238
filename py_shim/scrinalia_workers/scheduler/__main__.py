"""python -m scrinalia_workers.scheduler"""

import sys

from scrinalia_workers.scheduler.daemon import main

sys.exit(main())

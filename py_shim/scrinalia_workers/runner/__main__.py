"""python -m scrinalia_workers.runner"""

import sys

from scrinalia_workers.runner.daemon import main

sys.exit(main())

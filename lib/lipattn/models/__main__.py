"""``python -m lipattn.models report PATH --tokens 1,2,3``: see :mod:`lipattn.models.report`."""

import sys

from .report import main

sys.exit(main())

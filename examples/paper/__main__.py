"""`python -m examples.paper`: see the package's docstring."""

import sys

from .command import main


sys.exit(main())

"""``python -m cmix_course ...``: see :mod:`cmix_course.cli`."""
import sys

from .cli import main

sys.exit(main())

"""``python -m hilock``: the ``hilock`` command (see hilock.cli)."""
import sys

from .cli import main

sys.exit(main())

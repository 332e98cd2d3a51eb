"""``python scripts/fuzz ...``: the campaign's command line (see ``fuzz.cli``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the fuzz package

from fuzz.cli import main

sys.exit(main())

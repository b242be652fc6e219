"""`python -m batchd`: the `batchd` command."""
import sys

from .cli import main

sys.exit(main())

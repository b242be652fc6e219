"""`python -m batchd`: the `batchd` command."""
import sys

from .cli.main import main

sys.exit(main())

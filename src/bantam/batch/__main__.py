"""`python -m bantam.batch`: one agent process of a batch or worker (see agent.py); not for people."""
import sys

from ..commandline import guarded
from .agent import main

sys.exit(guarded(main))

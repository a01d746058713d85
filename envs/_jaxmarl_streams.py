"""jaxmarl's environments, imported with the importer's sys.stdout and sys.stderr kept.

jaxmarl's mabrax module silences brax's import by swapping the two streams and then sets
them to ``sys.__stdout__`` and ``sys.__stderr__``, which drops any redirection in force (a
caller's log file, pytest's capsys). Imported first by ``envs``, so that no later import of
jaxmarl runs that module again.
"""

import sys

_streams = sys.stdout, sys.stderr
try:
    import jaxmarl.environments  # noqa: F401
finally:
    sys.stdout, sys.stderr = _streams

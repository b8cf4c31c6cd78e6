
import os


def pythonpath_with(root) -> str:
    """PYTHONPATH for a subprocess: the checkout first, then whatever the environment had (a machine
    that provides the dependencies through PYTHONPATH keeps them)."""
    return os.pathsep.join([str(root)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))

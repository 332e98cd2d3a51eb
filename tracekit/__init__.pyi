# The public names of the package, typed (they are imported lazily by __init__.py).
from .api import analyze as analyze
from .api import diff as diff
from .marks import range as range
from .marks import step as step
from .reading.trace import read_trace as read_trace
from .schema import TraceInfo as TraceInfo
from .schema import TraceTables as TraceTables

__version__: str
__all__ = ["TraceInfo", "TraceTables", "__version__", "analyze", "diff", "range", "read_trace", "step"]

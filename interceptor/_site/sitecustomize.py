"""Zero-code attach: imported by Python at start-up when this directory is on ``PYTHONPATH``.

With ``PROGRESS_CONTROL_AUTOLOAD=1`` it rebinds confluent-kafka's producer classes to the
instrumented ones before the application imports them. Any other ``sitecustomize`` further down
``sys.path`` still runs.
"""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("PROGRESS_CONTROL_AUTOLOAD", "").lower() in {"1", "true", "yes"}:
    try:
        from interceptor.autoload import install

        install()
    except Exception as exc:  # never stop the application from starting
        print(f"progress-control: autoload failed, running without it: {exc!r}", file=sys.stderr)

_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)

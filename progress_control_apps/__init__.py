"""The applications, on top of everything else: the ``progress-control`` command (``cli``), the
end-to-end demo (``demo``), the Spark sessionization jobs (``spark``), the embedded development
services and jar cache (``dev``) and the build tooling (``tools``, not in the wheel).

They import the foundation (:mod:`progress_control`) and the components (:mod:`interceptor`,
:mod:`sidecar`, :mod:`streams_runtime`); nothing imports them (``./dev lint`` checks it).
"""

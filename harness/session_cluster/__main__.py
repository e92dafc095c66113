"""An instance of the session application, as :class:`~harness.session_cluster.instance.Instance`
starts it: ``python -m harness.session_cluster --instance SOURCE SINK PORT_FILE``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import cast

from harness.session_cluster.app import run_instance, topology
from harness.session_cluster.config import TOPOLOGY_ENV, TopologyName


def _instance_main(source: str, sink: str, port_file: Path) -> None:
    name = cast(TopologyName, os.environ.get(TOPOLOGY_ENV, "dsl"))
    run_instance(topology(name, source, sink), port_file)


def _main() -> None:
    if sys.argv[1:2] != ["--instance"] or len(sys.argv) != 5:
        sys.exit("usage: python -m harness.session_cluster --instance SOURCE SINK PORT_FILE")
    _instance_main(sys.argv[2], sys.argv[3], Path(sys.argv[4]))


if __name__ == "__main__":
    _main()

"""progress_control_apps/tools/helm.py's first-run build shows what it does and how far it got
(issue 17), with a stand-in ``go`` that reports as the real one does: ``go: downloading`` lines
while modules are fetched, and ``go install -v`` package paths as they are compiled."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

import progress_control_apps.demo.steps
from progress_control_apps.tools.helm import (
    HELM_VERSION,
    HelmBuildError,
    helm_binary,
    helm_needs_build,
)

_GO_MOD = "module helm.sh/helm/v3\n\nrequire (\n\tk8s.io/client-go v0.35.1\n)\n"


def _fake_go(tmp_path: Path, *, install_exit: int = 0) -> Path:
    module_dir = tmp_path / "module"
    (module_dir / "cmd" / "helm").mkdir(parents=True)
    (module_dir / "go.mod").write_text(_GO_MOD)
    go = tmp_path / "go"
    go.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            case "$1" in
              mod) echo '{json.dumps({"Dir": str(module_dir)})}' ;;
              list)
                echo "go: downloading k8s.io/api v0.35.1" >&2; sleep 0.4
                echo "go: downloading k8s.io/client-go v0.35.1" >&2; sleep 0.4
                printf 'runtime\\nk8s.io/client-go/rest\\nhelm.sh/helm/v3/cmd/helm\\n' ;;
              install)
                echo runtime >&2; sleep 0.4
                echo k8s.io/client-go/rest >&2; sleep 0.4
                [ {install_exit} -eq 0 ] || {{ echo "rest.go:1: syntax error" >&2; exit 1; }}
                echo helm.sh/helm/v3/cmd/helm >&2
                printf '#!/bin/sh\\necho v{HELM_VERSION}+gabc\\n' > "$GOBIN/helm"
                chmod +x "$GOBIN/helm" ;;
            esac
            """
        )
    )
    go.chmod(0o755)
    return go


@pytest.fixture
def quick_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROGRESS_CONTROL_HELM", raising=False)
    monkeypatch.setattr(progress_control_apps.demo.steps, "PLAIN_PROGRESS_S", 0.3)


@pytest.mark.usefixtures("quick_progress")
def test_a_first_build_shows_its_steps_and_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_GO", str(_fake_go(tmp_path)))
    cache = tmp_path / "cache"
    assert helm_needs_build(cache)
    out = io.StringIO()
    binary = helm_binary(cache, out=out)
    assert binary == cache / "tools" / f"helm-{HELM_VERSION}" / "helm"
    assert not helm_needs_build(cache)
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith(f"Building Helm v{HELM_VERSION} from the Go module proxy into ")
    download = f"[1/2] Downloading Helm v{HELM_VERSION}'s Go modules"
    compile_ = f"[2/2] Compiling Helm v{HELM_VERSION}"
    assert lines[1] == f"{download} ..."
    assert any(
        line.startswith(f"{download} ... ") and "modules downloaded (k8s.io/" in line
        for line in lines
    ), text
    assert any(line.startswith(f"{download} done in ") for line in lines), text
    assert f"{compile_} ..." in lines
    # The total comes from the package list: "n/3 packages compiled (the last one)".
    assert any(
        line.startswith(f"{compile_} ... ") and "/3 packages compiled (" in line for line in lines
    ), text
    assert lines[-1].startswith(f"{compile_} done in ")

    # Cached now: nothing is shown.
    out = io.StringIO()
    assert helm_binary(cache, out=out) == binary
    assert out.getvalue() == ""


@pytest.mark.usefixtures("quick_progress")
def test_a_failed_build_says_which_step_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_GO", str(_fake_go(tmp_path, install_exit=1)))
    out = io.StringIO()
    with pytest.raises(HelmBuildError, match="syntax error") as failure:
        helm_binary(tmp_path / "cache", out=out)
    assert "go install -v" in str(failure.value)
    assert (
        out.getvalue()
        .splitlines()[-1]
        .startswith(f"[2/2] Compiling Helm v{HELM_VERSION} failed after ")
    )
    assert helm_needs_build(tmp_path / "cache")

"""The driver's main program runs the app's script as __main__ with its args, untouched; the shipped
pipelines go through the same path; a failing script ends the driver with its error logged."""

from __future__ import annotations

import pytest

from sparkscale.agent.bootstrap import app_script, run_script
from sparkscale.config import AppConfig, ConfigError, load_config
from sparkscale_lab.pipelines.workloads import SHIPPED_JOB


def test_a_script_app_runs_its_own_script_with_its_args(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    app = AppConfig(name="clicks", script=str(script), args=["--input", "/in"])
    assert app_script(app, "/etc/sparkscale.yaml", ["x=1"]) == (str(script.resolve()), ["--input", "/in"])


def test_an_example_pipeline_runs_its_plug_in_script_with_the_config_passed_on():
    app = AppConfig(name="wc", pipeline="wordcount")
    assert app_script(app, "/c.yaml", ["loop.interval_s=2"]) == (
        str(SHIPPED_JOB), ["--app", "wc", "--config", "/c.yaml", "--set", "loop.interval_s=2"])
    assert SHIPPED_JOB.is_file()


def test_run_script_sets_argv_and_main_and_returns_the_exit_code(tmp_path):
    out = tmp_path / "seen.txt"
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        "if __name__ == '__main__':\n"
        f"    open({str(out)!r}, 'w').write(' '.join(sys.argv[1:]))\n"
        "    sys.exit(3)\n")
    assert run_script("a", str(script), ["--input", "/in"]) == 3
    assert out.read_text() == "--input /in"


def test_a_script_that_raises_ends_with_1(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("raise RuntimeError('no input directory')\n")
    assert run_script("a", str(script), []) == 1


def test_script_and_pipeline_are_alternatives_and_the_script_must_exist(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"apps:\n  - name: clicks\n    script: {tmp_path}/missing.py\n"
                    f"  - name: both\n    script: {path}\n    pipeline: dag\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert f"apps.0.script: {tmp_path}/missing.py does not exist or is not a file (app 'clicks')" in text
    assert "apps.1: give either script (your own job) or pipeline (a shipped one), not both (app 'both')" in text
    assert AppConfig(name="plain").pipeline == "wordcount"

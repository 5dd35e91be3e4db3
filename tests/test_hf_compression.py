"""`python -m bench hf-compression` runs and prints one table row per model, method and window."""
import pytest

from bench import hf_compression


@pytest.mark.drill
def test_it_prints_its_table(capsys):
    assert hf_compression.main(["--seeds", "1", "--windows", "6"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line.endswith("x |")
            or line.endswith("x | - |")]
    assert len(rows) == 3 * 3                                      # 3 models x 3 methods, one window
    assert all(float(r.split("|")[4].split(",")[1].strip().rstrip("x")) >= 1.0 for r in rows)

"""The README's Python examples run as written."""

import pathlib
import re

README = pathlib.Path(__file__).parent.parent / "README.md"


def test_readme_python_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})  # noqa: S102
    out = capsys.readouterr().out
    assert 'digraph "plan"' in out and "items/s" not in out


def test_ci_runs_exactly_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"{ci}\n" in README.read_text()


def test_readme_links_and_picture_point_at_files_that_exist():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#]+)\)", text) + re.findall(r'<img src="([^"]+)"', text)
    assert "docs/img/ppo-plan.svg" in targets and "docs/getting-started.md" in targets
    missing = [t for t in targets if not (README.parent / t).is_file()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_the_rendered_plan_in_the_readme_is_ppos_current_plan(tmp_path, capsys):
    """docs/img/ppo-plan.svg is ``flowrl plan ppo --format svg``: it draws the nodes
    of PPO's plan as it is now (regenerate it, with Graphviz's dot, when they change)."""
    from flowrl.cli import main

    assert main(["plan", "ppo", "-o", str(tmp_path / "ppo.dot")]) == 0
    nodes = set(re.findall(r'^"([^"]+)" \[', (tmp_path / "ppo.dot").read_text(), flags=re.M))
    svg = (README.parent / "docs" / "img" / "ppo-plan.svg").read_text()
    titles = set(re.findall(r"<title>([^<]*)</title>", svg))
    drawn = {t for t in titles if t != "ppo" and not t.startswith("cluster_")
             and "&#45;&gt;" not in t}
    assert nodes and drawn == nodes

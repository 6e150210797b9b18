"""Collection settings for the whole tree (tests/conftest.py holds the fixtures)."""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))

# Until flowrl/envs/ has its __init__.py (another branch adds it), pytest's doctest
# collection would import flowrl/envs/mujoco.py as a top-level module named "mujoco",
# which shadows the mujoco package for every MuJoCo env in the session. Once the
# package exists, pytest imports it as flowrl.envs.mujoco and this ignores nothing.
collect_ignore = ([] if os.path.exists(os.path.join(_HERE, "flowrl", "envs", "__init__.py"))
                  else ["flowrl/envs/mujoco.py"])

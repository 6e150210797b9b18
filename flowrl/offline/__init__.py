"""Offline RL: datasets of recorded experience, and estimating a policy's value from them.

Datasets (written by rollout workers through ``output``, read through ``input``:
:mod:`flowrl.workers.dataset_input`; ``docs/offline.md`` shows how):

- :mod:`flowrl.offline.rllib_json`: RLlib 1.x's JSON-lines format;
- :mod:`flowrl.offline.parquet`: batches as Parquet tables (pyarrow);
- :mod:`flowrl.offline.writer`: :class:`DatasetWriter`, a worker's atomic files;
- :mod:`flowrl.offline.reader`: :class:`DatasetReader`, pieces, shards and passes;
- :mod:`flowrl.offline.settings`: the ``input``, ``input_config`` and
  ``output_config`` settings, checked.

Off-policy estimation: :mod:`flowrl.offline.estimators`, :mod:`flowrl.offline.fqe`.
"""

from flowrl.offline.reader import DatasetReader, list_files
from flowrl.offline.settings import input_sources
from flowrl.offline.writer import DatasetWriter

__all__ = ["DatasetReader", "DatasetWriter", "list_files", "input_sources"]

"""The representative plan behind the golden DOT test (importable by a subprocess)."""

import flowrl
from flowrl import Concurrently


def double(x):
    return 2 * x


def build() -> flowrl.Plan:
    rollouts = flowrl.from_range(40, num_shards=4, name="rollouts")
    trained = (rollouts.for_each(double, name="postprocess")
               .gather_async(num_async=2, name="rollouts.gather_async")
               .batch(4, name="concat").for_each(sum, name="train"))
    aggregated = (flowrl.from_range(20, num_shards=4, name="replay")
                  .aggregate(2, lambda g: g.batch(2), name="tree")
                  .gather_sync(name="tree.gather"))
    left, right = trained.duplicate(2, name="split")
    return flowrl.Plan(Concurrently([left, right.filter(bool, name="nonzero"), aggregated],
                                    mode="async", name="mix"), name="golden")


if __name__ == "__main__":
    print(build().to_dot(), end="")

"""The frozen-world worker, one per process (a local worker process or a Ray actor).

- `config`: what a worker is told (`WorkerConfig`, `RolloutTask`); plain data.
- `runtime`: the world runtime (`WorldRuntime`): tools, policy, grading, the record.
- `tools`: what a tool is given and how its call is judged (fixture use, errors).
- `capture`: what in-world code prints, captured per call.
- `timers`: the rollout's alarm and the phase a worker is in.
- `lost`: the records of rollouts stopped by their timer or whose worker died.
- `protocol`: entering the world and the one table of calls a worker answers.

Nothing is imported here: the orchestrator imports `config` without loading the world.
"""

"""The frozen world's mechanisms: frozen clock and process environment (`freeze`), replayed
tool HTTP (`replay`), recording (`record`), secret scrubbing (`scrub`), refused network
(`netguard`) and per-rollout filesystem snapshots (`snapshot`).

Mechanisms only: the rollout worker that enters the world and drives rollouts in it is
`rlenv.worker`. The patches are process-wide, so they are applied in worker processes only and
never touch the model endpoint of a policy outside the world.
"""

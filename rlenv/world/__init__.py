"""The frozen world: replayed tool HTTP, refused network, frozen clock, seeded RNGs, snapshots.

Runs inside worker processes only, so its process-wide patches never touch the model endpoint.
"""

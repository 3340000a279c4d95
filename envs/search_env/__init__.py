"""Bundled search environment: a BM25 HTTP service over a fictional-world corpus, its tool
client, and reference policies (baseline, null, padded)."""

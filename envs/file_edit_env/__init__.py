"""Helpers of the bundled file-edit env: tools, policies (baseline and null)."""
